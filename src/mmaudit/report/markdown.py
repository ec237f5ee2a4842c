"""report.md: every table, the notes that say how to read them, and example image pairs."""

from __future__ import annotations

import html
import re
from pathlib import Path

from mmaudit.jsonout import dumps
from mmaudit.pathways import registry
from mmaudit.report.tables import all_tables, moved_text, pct
from mmaudit.report.transfer import transfer_tables


def intro(summary: dict) -> str:
    """What the tables hold, with R0's members and each δ's baselines as the registry declares them."""
    b = summary.get("bootstrap", {})
    baselines = ", ".join(registry.display(a) for a in summary.get("baselines", []))
    deltas = "; ".join(f"{registry.display(e)} against {' and '.join(registry.display(x) for x in bs)}"
                       for e, bs in summary.get("enhanced", {}).items())
    return (f"Clean: % of all questions answered correctly. Attack columns (ASR), R0 (union of the baselines "
            f"{baselines}), R+ (union of all attacks), R+ − R0 (the risk the diagnostics expose; its level CI is "
            "taken on each replicate's difference: the paired bootstrap)"
            + (f" and δ (flipped by the enhanced attack and by none of its baselines: {deltas})" if deltas else "")
            + ": % of each model's clean-correct set C. Level rows: unweighted macro mean with a 95% percentile "
            f"bootstrap CI ({b.get('replicates')} replicates, seed {b.get('seed')}; risk: questions resampled, models "
            "fixed; diagnostics: each model's samples resampled).")


def union_note(summary: dict) -> str:
    """The union schedule in the order the registry gives it, over the attacks this run ran."""
    order = [a for a in registry.union_order() if a in summary.get("attacks", [])]
    steps = [f"{registry.display(a)} on " + ("all of C" if i == 0 else "what " + (
        registry.display(order[0]) if i == 1 else "all earlier ones") + " left") for i, a in enumerate(order)]
    later = " and ".join(registry.display(a) for a in order[1:])
    return (f"Union schedule (AutoAttack-style): {', '.join(steps)}. R0, R+ and δ are exact"
            + (f"; the {later} columns are lower bounds." if later else "."))


MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#!])")


def md_text(text) -> str:
    """Untrusted text as inert Markdown: one line, HTML escaped, and Markdown's own punctuation backslashed,
    so a sample id or model output can neither open a tag nor a code span, link or emphasis, nor split a
    table cell."""
    return MD_SPECIAL.sub(r"\\\1", html.escape(" ".join(str(text).split()), quote=False))


def md_table(title: str, head: list[str], rows: list[list[str]]) -> list[str]:
    return ["", f"## {html.escape(title)}", "", "| " + " | ".join(md_text(h) for h in head) + " |",
            "|" + " --- |" * len(head)] + ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]


def validity_rows(validity: dict) -> tuple[list[str], list[list[str]]]:
    """The clean-accuracy check as a table: per model and dataset, accuracy, threshold and the prompt in force."""
    head = ["model", "level", "dataset", "clean", "correct", "threshold", "instruction after the question"]
    return head, [[r["model"], r["level"], r["dataset"], f"{pct(r['accuracy'])}%", f"{r['correct']}/{r['n']}",
                   f"{pct(r['threshold'])}% ({r['threshold_source']})", r["instruction"] or "(none: bare question)"]
                  for r in validity["clean"]]


def validity_lines(validity: dict | None) -> list[str]:
    if not validity:
        return []
    head, rows = validity_rows(validity)
    lines = md_table("Validity: clean accuracy per dataset, and the prompt in force", head, rows)
    return lines + [""] + [f"**Warning:** {md_text(w)}" for w in validity["warnings"]]


def member_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """The ensembles' members: what each flipped of what reached it, at what cost."""
    return (["model", "attack", "member", "questions reached", "flipped", "mean passes per question reached"],
            [[r["model"], registry.display(r["attack"]), r["member"], str(r["reached"]), str(r["flipped"]),
              f"{r['passes']:.1f}"] for r in summary.get("members") or []])


def member_lines(summary: dict) -> list[str]:
    """The members table and the masking warnings, in markdown."""
    head, rows = member_rows(summary)
    if not rows:
        return []
    lines = md_table("Ensemble members (strong preset): each runs on what the earlier ones left", head, rows)
    return lines + [""] + [f"**Warning:** {md_text(w)}" for w in (summary.get("masking") or {}).get("warnings", [])]


def write_report(summary: dict, out: Path, notes: list[str] | None = None) -> Path:
    (out / "summary.json").write_text(dumps(summary, indent=2))
    lines = ["# FusionAudit report", "", "## Headline", ""] + [f"- {md_text(s)}" for s in
                                                             summary.get("headline", {}).get("sentences", [])]
    lines += ["", intro(summary)] + (notes or [])
    if summary.get("schedule") == "union":
        lines += ["", union_note(summary)]
    lines += validity_lines(summary.get("validity"))
    lines += member_lines(summary)
    for title, head, rows in all_tables(summary):
        lines += md_table(title, head, rows)
    lines += [f"**Warning:** {md_text(w)}" for w in (summary.get("channels") or {}).get("warnings", [])]
    for title, head, rows in transfer_tables(summary):
        lines += md_table(title, head, rows)
    if summary["ranking"]:
        rk = summary["ranking"]
        lines += ["", f"End-PGD vs R+ ranking over {rk['n_models']} models: Spearman rho {rk['spearman_rho']:.3f}, "
                  f"Kendall tau-b {rk['kendall_tau_b']:.3f}, {rk['n_moved']} moved {moved_text(rk)}."]
    rec = summary.get("recovery", {})
    for e in rec.get("excluded", []):
        lines += [f"- layer recovery excludes {e['model']} ({e['level']}): {e['reason']}"]
    ocr = summary.get("ocr", {})
    if ocr.get("unavailable"):
        lines += ["", f"OCR evidence check not run: {ocr['unavailable'][0]}"]
    else:
        for attack, o in (ocr.get("attacks") or ({"nat_evid": ocr} if ocr.get("checked") else {})).items():
            lines += ["", f"OCR evidence check ({registry.display(attack)}, charts and documents): OCR reads the "
                      f"reference on {o['readable_on_clean']} of {o['checked']} clean images; on the edited image it "
                      f"still reads it on {o['still_read']} ({pct(o['rate'])}%)."]
    if summary["mean_passes"]:
        lines += ["", "Mean model passes per clean-correct sample: "
                  + ", ".join(f"{registry.display(a)} {v:.1f}" for a, v in summary["mean_passes"].items())]
    if summary.get("edit_failures"):
        lines += ["", "Edits that could not be made (counted as not flipped): "
                  + ", ".join(f"{registry.display(a)} {n}" for a, n in summary["edit_failures"].items())]
    lines += ["", f"Errors (samples that could not be audited): {len(summary['errors'])}"]
    lines += [f"- {md_text(e['sample'])} · {md_text(e['field'])}: {md_text(e['reason'])}" for e in summary["errors"]]
    for attack, items in summary.get("examples", {}).items():
        lines += ["", f"## Examples: {registry.display(attack)}", ""]
        for x in items:
            overlay = f", overlay {x['overlay']!r}" if x.get("overlay") else ""
            lines += [f"{md_text(x['model'])} · {md_text(x['sample'])} · {md_text(x['question'])} "
                      f"(reference {md_text(x['reference'])}{md_text(overlay)}): clean → "
                      f"**{md_text(x['clean_answer'])}**, attacked → **{md_text(x['attacked_answer'])}**", "",
                      f"![clean]({x['clean_image']}) ![attacked]({x['attacked_image']})", ""]
    for x in (summary.get("transfer") or {}).get("examples", []):
        lines += ["", f"Transferred: {md_text(x['source'])} · {md_text(registry.display(x['attack']))} → "
                  f"{md_text(x['target'])} · {md_text(x['sample'])} · {md_text(x['question'])} (reference "
                  f"{md_text(x['reference'])}): clean → **{md_text(x['clean_answer'])}**, transferred image → "
                  f"**{md_text(x['attacked_answer'])}**", "",
                  f"![clean]({x['clean_image']}) ![transferred]({x['attacked_image']})"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
