"""The report's tables as (title, header, rows) of strings: one source for the terminal and report.md."""

from __future__ import annotations

from mmaudit.pathways import registry
from mmaudit.report.channels import channel_tables

Table = tuple[str, list[str], list[list[str]]]


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}"


def ci(t, scale: float = 100.0, fmt: str = ".1f") -> str:
    point, lo, hi = t
    if point != point:
        return "n/a"
    return f"{scale * point:{fmt}} [{scale * lo:{fmt}}, {scale * hi:{fmt}}]"


def num(x: float, fmt: str = ".2f") -> str:
    return "n/a" if x != x else f"{x:{fmt}}"


NOT_MEASURED = "not measured"


def models_label(n: int) -> str:
    return f"{n} model" if n == 1 else f"{n} models"


def coverage_note(summary: dict) -> str:
    """'' for the full suite; else which attacks each union covers and what was not run (a partial suite)."""
    cov = summary.get("coverage") or {}
    if not cov.get("partial"):
        return ""
    names = lambda attacks: ", ".join(registry.display(a) for a in attacks) or "none"  # noqa: E731
    return (f"partial suite: R0 covers {names(cov['r0'])}; R+ covers {names(cov['r_plus'])}; not run: "
            f"{names(cov['missing'])}" + ("; R+ − R0 and δ where their attacks are missing: not measured"
                                          if cov["not_measured"] else ""))


def not_run_note(summary: dict) -> str:
    """'' when every model took every attack; else, per model, what it could not take and why (a black-box
    target: no gradients), whose cells read n/a."""
    parts = []
    for r in summary["models"]:
        by_reason: dict[str, list[str]] = {}
        for attack, reason in r.get("not_run", {}).items():
            by_reason.setdefault(reason, []).append(registry.display(attack))
        parts += [f"{r['model']}: {', '.join(names)} n/a ({reason})" for reason, names in by_reason.items()]
    return "; ".join(parts)


def _cell(summary: dict, key: str, value, fmt) -> str:
    return NOT_MEASURED if key in (summary.get("coverage") or {}).get("not_measured", ()) else fmt(value)


def table_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """Table 1's model rows: clean accuracy, |C|, each attack's ASR, R0, R+, the gap and each δ (points)."""
    attacks, enhanced = summary["attacks"], list(summary["enhanced"])
    star = "*" if (summary.get("coverage") or {}).get("partial") else ""
    head = ["model", "level", "clean", "|C|"] + [registry.display(a) for a in attacks] + \
        [f"R0{star}", f"R+{star}", "R+ − R0"] + [f"δ {registry.display(e)}" for e in enhanced]
    rows = []
    for r in summary["models"]:
        rows.append([r["model"], r["level"], pct(r["clean_acc"]), str(r["n_correct"])]
                    + [pct(r["asr"][a]) for a in attacks] + [pct(r["r0"]), pct(r["r_plus"])]
                    + [_cell(summary, "gap", r["gap"], pct)]
                    + [_cell(summary, f"delta_{e}", r["delta"][e], pct) for e in enhanced])
    return head, rows


def level_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """The level macros, one column per level (so CIs fit a terminal): mean over the level's models, 95% CI."""
    attacks, enhanced, levels = summary["attacks"], list(summary["enhanced"]), summary["levels"]
    keys = [(f"asr_{a}", registry.display(a)) for a in attacks] + [("r0", "R0"), ("r_plus", "R+"), ("gap", "R+ − R0")] \
        + [(f"delta_{e}", f"δ {registry.display(e)}") for e in enhanced]
    head = ["metric"] + [f"{lv} ({models_label(m['n_models'])})" for lv, m in levels.items()]
    return head, [[label] + [_cell(summary, key, m[key], ci) for m in levels.values()] for key, label in keys]


def _two_part(table: dict, cols: list[tuple[str, str, str]]) -> list[list[str]]:
    """Model rows (points) then level rows (points with CIs); cols: (key, kind, _) with kind pct or num."""
    rows = []
    for r in table["models"]:
        rows.append([r["model"], r["level"], str(r["n"])]
                    + [pct(r[k]) if kind == "pct" else num(r[k]) for k, kind, _ in cols])
    for level, m in table["levels"].items():
        rows.append([f"{level} macro ({models_label(m['n_models'])})", level, ""]
                    + [ci(m[k]) if kind == "pct" else ci(m[k], 1.0, ".2f") for k, kind, _ in cols])
    return rows


def diagnostic_tables(summary: dict) -> list[Table]:
    tables: list[Table] = []
    for attack, d in summary.get("text", {}).items():
        name = registry.display(attack)
        cols = [("p_read", "pct", "P_read"), ("p_use", "pct", "P_use"), ("rug", "pct", "RUG")]
        tables.append((f"RUG, {name} (% of overlays; RUG = P_read - P_use)", ["model", "level", "n"]
                       + [c[2] for c in cols], _two_part(d["rug"], cols)))
        cols = [("oar", "num", "OAR attacked"), ("oar_clean", "num", "OAR clean"), ("increase", "pct", "increase %")]
        tables.append((f"OAR, {name} (overlay attention / area share; clean = same region of the clean image)",
                       ["model", "level", "n"] + [c[2] for c in cols], _two_part(d["oar"], cols)))
        cols = [("rate", "pct", "restored %")]
        tables.append((f"Evidence preservation, {name}: masking the clue restores the correct answer (flips only)",
                       ["model", "level", "flips"] + [c[2] for c in cols], _two_part(d["mask_restored"], cols)))
    rec = summary.get("recovery")
    if rec and rec["models"]:
        rows = _two_part(rec, [("rate", "pct", "")])
        for row, m in zip(rows, rec["models"]):
            row.insert(3, str(m["flips_tried"]))
            row.append(" ".join(pct(x) for x in m["by_layer"]))
        for row in rows[len(rec["models"]):]:
            row.insert(3, "")
            row.append("")
        tables.append((f"Layer recovery of End-PGD flips (patched positions: {', '.join(rec['positions'])})",
                       ["model", "level", "reproduced", "tried", "recovered %", "by layer %"], rows))
    return tables


def all_tables(summary: dict) -> list[Table]:
    note = coverage_note(summary)
    head, rows = table_rows(summary)
    lhead, lrows = level_rows(summary)
    suffix = "".join(f" ({n})" for n in (note, not_run_note(summary)) if n)
    return [(f"FusionAudit: % of each model's clean-correct set{suffix}", head, rows),
            (f"Level macros: % of C, mean over each level's models, 95% CI{' (partial suite)' if note else ''}",
             lhead, lrows)] + \
        channel_tables(summary) + diagnostic_tables(summary)


def moved_text(ranking: dict) -> str:
    """'three or more places', or the scaled-down threshold with the reason (few models cannot move three)."""
    k = ranking.get("moved_by", 3)
    if k == 3:
        return "three or more places"
    n = ranking["n_models"]
    return f"{k} or more places (the paper counts three; {n} models can move at most {n - 1})"
