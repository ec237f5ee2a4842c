"""The headline a reader takes away: per level R0, R+ and the gap with their CIs, clean accuracy and |C|, the
End-PGD vs R+ rank agreement, and one sentence each for what the numbers say. Every number and sentence is
computed from the summary; none is written by hand."""

from __future__ import annotations

import numpy as np

from mmaudit.report.channels import channel_sentence
from mmaudit.report.tables import coverage_note, moved_text, not_run_note


def _pct(t) -> str:
    point, lo, hi = t
    return "n/a" if point != point else f"{100 * point:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _points(t) -> str:
    point, lo, hi = t
    return "n/a" if point != point else f"{100 * point:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def headline(summary: dict) -> dict:
    """Rows per level and the sentences that read them."""
    gap_measured = "gap" not in (summary.get("coverage") or {}).get("not_measured", ())
    rows = []
    for level, m in summary["levels"].items():
        group = [r for r in summary["models"] if r["level"] == level]
        rows.append({"level": level, "n_models": m["n_models"],
                     "clean": float(np.mean([r["clean_acc"] for r in group])) if group else float("nan"),
                     "n_correct": [r["n_correct"] for r in group], "r0": m["r0"], "r_plus": m["r_plus"],
                     "gap": m["gap"]})
    sentences = []
    for check in summary.get("endpoint_checks") or []:  # the cause first, before any number
        c = check.get("canary")
        if c and not c["read"]:
            sentences.append(f"{check['model']}: the endpoint did not read the canary image ({c['reason']}); its "
                             "numbers below do not measure a model that sees the images.")
    for r in rows:
        c = ", ".join(str(n) for n in r["n_correct"])
        text = (f"{r['level']} ({r['n_models']} model{'s' if r['n_models'] != 1 else ''}, clean accuracy "
                f"{100 * r['clean']:.1f}%, |C| {c}): R+ {_pct(r['r_plus'])} of the clean-correct set; the baselines "
                f"alone (R0) {_pct(r['r0'])}")
        text += f"; the diagnostics expose {_points(r['gap'])} beyond them." if gap_measured else \
            "; R+ − R0 is not measured (no enhanced attack was run)."
        sentences.append(text)
    measured = [r for r in rows if gap_measured and r["gap"][0] == r["gap"][0]]
    if len(measured) > 1:
        hi = max(measured, key=lambda r: r["gap"][0])
        lo = min(measured, key=lambda r: r["gap"][0])
        if round(100 * hi["gap"][0], 1) == round(100 * lo["gap"][0], 1):
            sentences.append(f"The diagnostics expose as much at every level ({100 * hi['gap'][0]:+.1f} points).")
        else:
            sentences.append(f"The diagnostics expose most at {hi['level']} ({100 * hi['gap'][0]:+.1f} points) and "
                             f"least at {lo['level']} ({100 * lo['gap'][0]:+.1f} points).")
    rk = summary.get("ranking")
    if rk:
        rho = rk["spearman_rho"]
        agree = "undefined (constant ranks)" if rho != rho else f"Spearman ρ {rho:.2f}"
        sentences.append(f"Ranking the {rk['n_models']} models by End-PGD alone against ranking them by R+: {agree}; "
                         f"{rk['n_moved']} moved {moved_text(rk)}" + (f" ({', '.join(rk['moved'])})." if rk["moved"]
                                                                      else "."))
    t = summary.get("transfer")
    if t and t["targets"]:
        parts = [f"{r['target']} {_pct(r['r_plus_black_box'])}"
                 + (f" (output-loss images {100 * r['r_plus_output_loss'][0]:.1f}%, surrogate images "
                    f"{100 * r['r_plus_surrogate'][0]:.1f}%)" if r.get("r_plus_surrogate") else "")
                 + (f" (white-box {100 * r['r_plus_white_box'][0]:.1f}%)" if r["r_plus_white_box"] else "")
                 for r in t["targets"]]
        sentences.append("Without the target's gradients (its rendered-text attacks and the other models' pixel "
                         f"attacks transferred), black-box R+: {'; '.join(parts)}.")
    st = summary.get("strength")
    if st:
        name = f"strength {st['preset']} " if st.get("preset") else ""
        sentences.append(f"Pixel attacks at {name}({strength_settings(st)}): R+ is a lower bound that a stronger "
                         "attack can only raise.")
    channel = channel_sentence(summary)
    if channel:
        sentences.append(channel)
    masked = [m for m in (summary.get("masking") or {}).get("models", []) if m["square_only"]]
    if masked:
        counts = ", ".join(f"{m['model']} {m['square_only']}" for m in masked)
        sentences.append("Gradient masking: the gradient-free Square attack flipped questions every gradient attack "
                         f"left ({counts}): the gradients may be masked there, and R+ is then a weaker bound than it "
                         "looks.")
    warnings = (summary.get("validity") or {}).get("warnings", [])
    if warnings:
        sentences.append(f"{len(warnings)} model-dataset pair{'s' if len(warnings) > 1 else ''} fall below the "
                         "clean-accuracy check (see Validity): those numbers rest on few questions.")
    note = coverage_note(summary)
    if note:
        sentences.append(note[0].upper() + note[1:] + ".")
    note = not_run_note(summary)
    if note:
        sentences.append(f"Not applicable: {note}; their R0 and R+ cover the attacks they took (the pixel pathway "
                         "of a black-box target is measured by transfer: `mmaudit audit transfer`).")
    return {"levels": rows, "sentences": sentences}


def strength_settings(st: dict) -> str:
    """How hard the pixel attacks tried, in words: "APGD, 100 steps, 3 restarts", each start's output-diversified
    initialisation, and an ensemble's members in their order with their budgets ("End-PGD: ce → dlr → margin →
    square:1000")."""
    from mmaudit.pathways import registry

    text = f"{st['optimiser'].upper()}, {st['steps']} steps" + (f", {st['restarts']} restarts" if st["restarts"] > 1
                                                                 else "")
    members, odi = st.get("members") or {}, st.get("odi") or {}
    if members:
        text += " per gradient member"
    if odi:
        text += " (output-diversified starts: " + ", ".join(f"{registry.display(a)} {n} ODI steps"
                                                            for a, n in odi.items()) + ")"
    if members:
        text += ("; ensembles " + "; ".join(f"{registry.display(a)}: {' → '.join(m)}" for a, m in members.items()))
    return text
