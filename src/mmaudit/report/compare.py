"""`mmaudit report --compare RUN_A RUN_B ...`: audit runs side by side on one page.

Each run's headline; Table 1's rows aligned by model and level (a column group per run); and, for every later
run against the first, the paired difference of R+ and of R+ - R0 per model the two runs share, over the
questions both scored: a paired bootstrap draws the shared questions once per replicate and computes both runs'
rates on that draw (each on its own clean-correct set), so the interval is that of the difference, not of two
separate estimates; and how many questions of both clean-correct sets only one of the two runs flipped (a
stronger attack setting shows here what it adds). Everything comes from the run folders alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mmaudit.errors import UsageError
from mmaudit.jsonout import write_json
from mmaudit.pathways import registry
from mmaudit.report.headline import strength_settings
from mmaudit.report.html import Page, esc, runs_html, table
from mmaudit.report.markdown import md_table, md_text
from mmaudit.report.risk import model_flags
from mmaudit.report.tables import pct
from mmaudit.stats import ModelFlags, union


def paired_difference(a: ModelFlags, b: ModelFlags, attacks_a: list[str], attacks_b: list[str], n_boot: int,
                      seed: int) -> dict:
    """R+ and R+ - R0 of run b minus run a for one model, over their shared questions, with paired bootstrap CIs."""
    shared = sorted(set(a.questions) & set(b.questions))
    if not shared:
        return {"shared": 0}
    ia = [a.questions.index(q) for q in shared]
    ib = [b.questions.index(q) for q in shared]

    def parts(m: ModelFlags, idx: list[int], attacks: list[str]) -> np.ndarray:
        c = m.correct[idx].astype(float)
        return np.stack([c, union(m, attacks)[idx].astype(float),
                         union(m, [x for x in registry.baselines() if x in attacks])[idx].astype(float)])

    pa, pb = parts(a, ia, attacks_a), parts(b, ib, attacks_b)
    rng = np.random.default_rng(seed)
    n = len(shared)
    w = np.ones((1, n))
    if n_boot:
        w = np.vstack([w, np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)])])
    with np.errstate(invalid="ignore", divide="ignore"):
        def rates(p):  # (R+, R0) per replicate on each run's own clean-correct set
            denom = w @ p[0]
            return (w @ (p[1] * p[0])) / denom, (w @ (p[2] * p[0])) / denom

        ra_plus, ra_zero = rates(pa)
        rb_plus, rb_zero = rates(pb)
    d_plus = rb_plus - ra_plus
    d_gap = (rb_plus - rb_zero) - (ra_plus - ra_zero)

    def ci(d: np.ndarray) -> list[float]:
        if not n_boot or np.isnan(d[1:]).all():
            return [float(d[0]), float("nan"), float("nan")]
        lo, hi = np.nanpercentile(d[1:], [2.5, 97.5])
        return [float(d[0]), float(lo), float(hi)]

    both = (pa[0] * pb[0]).astype(bool)  # in both runs' clean-correct sets
    only_run, only_ref = both & (pb[1] > 0) & ~(pa[1] > 0), both & (pa[1] > 0) & ~(pb[1] > 0)
    return {"shared": n, "r_plus": ci(d_plus), "gap": ci(d_gap), "both_correct": int(both.sum()),
            "only_run": int(only_run.sum()), "only_reference": int(only_ref.sum()),
            "only_run_questions": [q for q, o in zip(shared, only_run) if o],
            "only_reference_questions": [q for q, o in zip(shared, only_ref) if o]}


def flipping_members(store) -> dict[tuple[str, str, str], list[str]]:
    """(model, level, question) -> the ensemble members that flipped it (one per pixel attack that ran as an
    ensemble), from the records alone."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for r in store.records("attack"):
        if r.get("member") and r["flipped"]:
            out.setdefault((r["model"], r["level"], r["sample"]), []).append(
                f"{registry.display(r['attack'])} {r['member']}")
    return out


def by_member(questions: list[str], members: dict, model: str, level: str) -> dict[str, int]:
    """How many of ``questions`` each ensemble member flipped (a question two attacks flipped counts for both)."""
    counts: dict[str, int] = {}
    for q in questions:
        for m in members.get((model, level, q), []):
            counts[m] = counts.get(m, 0) + 1
    return counts


def compare_runs(runs: list[Path], out: Path, n_boot: int = 2000, seed: int = 0) -> dict:
    """Summaries, aligned rows and paired differences of ``runs`` (the first is the reference); writes
    compare.html, compare.md and compare.json into ``out``."""
    from mmaudit.report.build import audit_summary

    if len(runs) < 2:
        raise UsageError("--compare needs two or more audit run folders")
    loaded = []
    for run in runs:
        summary, store, invocations, params = audit_summary(run, n_boot)
        loaded.append({"run": run, "name": run.name if run.name else str(run), "summary": summary,
                       "flags": {(m.model, m.level): m for m in model_flags(store, params)},
                       "invocations": invocations, "members": flipping_members(store)})
    names = [x["name"] for x in loaded]
    if len(set(names)) < len(names):
        names = [str(x["run"]) for x in loaded]
    keys = sorted({k for x in loaded for k in x["flags"]}, key=lambda k: (k[1], k[0]))
    rows = []
    for model, level in keys:
        row = {"model": model, "level": level, "runs": {}}
        for name, x in zip(names, loaded):
            r = next((r for r in x["summary"]["models"] if (r["model"], r["level"]) == (model, level)), None)
            if r is not None:
                row["runs"][name] = {k: r[k] for k in ("clean_acc", "n_correct", "r0", "r_plus", "gap")}
        rows.append(row)
    base = loaded[0]
    diffs = []
    for name, x in zip(names[1:], loaded[1:]):
        for key in keys:
            if key in base["flags"] and key in x["flags"]:
                d = paired_difference(base["flags"][key], x["flags"][key], base["summary"]["attacks"],
                                      x["summary"]["attacks"], n_boot, seed)
                if d["shared"]:  # which ensemble members flipped what only one run flipped
                    d["only_run_by_member"] = by_member(d["only_run_questions"], x["members"], *key)
                    d["only_reference_by_member"] = by_member(d["only_reference_questions"], base["members"], *key)
                diffs.append({"model": key[0], "level": key[1], "against": names[0], "run": name} | d)
    result = {"runs": [{"name": n, "folder": str(x["run"]), "headline": x["summary"].get("headline", {}),
                        "attacks": x["summary"]["attacks"], "strength": x["summary"].get("strength")}
                       for n, x in zip(names, loaded)],
              "rows": rows, "paired": diffs, "bootstrap": {"replicates": n_boot, "seed": seed,
                                                           "resampled": "the questions both runs scored"}}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "compare.json", result)
    (out / "compare.md").write_text(_markdown(result, names))
    (out / "compare.html").write_text(_page(result, names, loaded))
    return result


def _table1(result: dict, names: list[str]) -> tuple[list[str], list[list[str]]]:
    head = ["model", "level"] + [f"{col} · {n}" for n in names for col in ("clean", "|C|", "R0", "R+", "R+ − R0")]
    body = []
    for r in result["rows"]:
        cells = [r["model"], r["level"]]
        for n in names:
            v = r["runs"].get(n)
            cells += ([pct(v["clean_acc"]), str(v["n_correct"]), pct(v["r0"]), pct(v["r_plus"]), pct(v["gap"])]
                      if v else ["—"] * 5)
        body.append(cells)
    return head, body


def _fmt(t: list[float]) -> str:
    point, lo, hi = t
    if point != point:
        return "n/a"
    return f"{100 * point:+.1f}" + ("" if lo != lo else f" [{100 * lo:+.1f}, {100 * hi:+.1f}]")


def _paired(result: dict) -> tuple[list[str], list[list[str]]]:
    head = ["model", "level", "run − reference", "shared questions", "Δ R+ (points, 95% CI)",
            "Δ (R+ − R0) (points, 95% CI)", "flipped only by the run", "flipped only by the reference"]
    return head, [[d["model"], d["level"], f"{d['run']} − {d['against']}", str(d["shared"]),
                   _fmt(d["r_plus"]) if d["shared"] else "no shared questions",
                   _fmt(d["gap"]) if d["shared"] else "", *_only(d)] for d in result["paired"]]


def _only(d: dict) -> list[str]:
    """Questions of both clean-correct sets that only one run's R+ flipped, as counts of that shared C."""
    if not d["shared"]:
        return ["", ""]

    def members(counts: dict) -> str:
        return f" ({', '.join(f'{m} {k}' for m, k in counts.items())})" if counts else ""

    return [f"{d['only_run']} of {d['both_correct']}{members(d.get('only_run_by_member'))}",
            f"{d['only_reference']} of {d['both_correct']}{members(d.get('only_reference_by_member'))}"]


def _strength(st: dict | None) -> str:
    if not st:
        return ""
    return f" · pixel attacks: {st.get('preset') or 'custom'} ({strength_settings(st)})"


def _markdown(result: dict, names: list[str]) -> str:
    lines = ["# FusionAudit runs compared", ""]
    for run in result["runs"]:
        lines += [f"## {md_text(run['name'])}", ""] + ([md_text(_strength(run["strength"]).lstrip(" ·")), ""]
                                                       if run.get("strength") else [])
        lines += [f"- {md_text(s)}" for s in run["headline"].get("sentences", [])]
    lines += md_table("Table 1, aligned by model and level (% of each model's clean-correct set)",
                      *_table1(result, names))
    lines += md_table(f"Paired differences against {names[0]} (paired bootstrap over shared questions, "
                      f"{result['bootstrap']['replicates']} replicates)", *_paired(result))
    return "\n".join(lines) + "\n"


def _page(result: dict, names: list[str], loaded: list[dict]) -> str:
    page = Page("FusionAudit runs compared", " · ".join(names))
    heads = "".join(f"<h3>{esc(r['name'])}</h3><p class=\"note\">{esc(r['folder'])} · attacks: "
                    f"{esc(', '.join(r['attacks']))}{esc(_strength(r.get('strength')))}</p><ul>"
                    + "".join(f"<li>{esc(s)}</li>" for s in r["headline"].get("sentences", [])) + "</ul>"
                    for r in result["runs"])
    page.add("headlines", "Headlines", heads)
    page.add("table1", "Table 1, aligned", table(*_table1(result, names)))
    page.add("paired", f"Paired differences against {names[0]}",
             "<p class=\"note\">Each later run minus the first, per model both ran, over the questions both scored: "
             f"{result['bootstrap']['replicates']} paired bootstrap replicates (seed {result['bootstrap']['seed']}) "
             "draw the shared questions once and compute both runs' rates on the draw.</p>"
             + table(*_paired(result)))
    page.add("runs", "Runs", "".join(f"<h3>{esc(n)}</h3>" + runs_html(x["invocations"], skip=("attack_params",))
                                     for n, x in zip(names, loaded)))
    return page.render()


def compare_text(result: dict) -> list[str]:
    """The paired differences as terminal lines."""
    return [f"{d['model']} ({d['level']}) {d['run']} − {d['against']}: Δ R+ {_fmt(d['r_plus'])}, "
            f"Δ (R+ − R0) {_fmt(d['gap'])} over {d['shared']} shared questions; of the {d['both_correct']} both "
            f"answered right, {d['only_run']} flipped only by {d['run']}, {d['only_reference']} only by "
            f"{d['against']}" if d["shared"] else
            f"{d['model']} ({d['level']}): no shared questions" for d in result["paired"]]

