"""The report's tables as (title, header, rows) of strings: one source for the terminal and report.md."""

from __future__ import annotations

from mmaudit.pathways import NAMES

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


def table_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    attacks, enhanced = summary["attacks"], list(summary["enhanced"])
    head = ["model", "level", "clean", "|C|"] + [NAMES.get(a, a) for a in attacks] + ["R0", "R+", "R+ − R0"] + \
        [f"δ {NAMES.get(e, e)}" for e in enhanced]
    rows = []
    for r in summary["models"]:
        rows.append([r["model"], r["level"], pct(r["clean_acc"]), str(r["n_correct"])]
                    + [pct(r["asr"][a]) for a in attacks] + [pct(r["r0"]), pct(r["r_plus"]), pct(r["gap"])]
                    + [pct(r["delta"][e]) for e in enhanced])
    for level, m in summary["levels"].items():
        rows.append([f"{level} macro ({m['n_models']} models)", level, "", ""]
                    + [ci(m[f"asr_{a}"]) for a in attacks] + [ci(m["r0"]), ci(m["r_plus"]), ci(m["gap"])]
                    + [ci(m[f"delta_{e}"]) for e in enhanced])
    return head, rows


def _two_part(table: dict, cols: list[tuple[str, str, str]]) -> list[list[str]]:
    """Model rows (points) then level rows (points with CIs); cols: (key, kind, _) with kind pct or num."""
    rows = []
    for r in table["models"]:
        rows.append([r["model"], r["level"], str(r["n"])]
                    + [pct(r[k]) if kind == "pct" else num(r[k]) for k, kind, _ in cols])
    for level, m in table["levels"].items():
        rows.append([f"{level} macro ({m['n_models']} models)", level, ""]
                    + [ci(m[k]) if kind == "pct" else ci(m[k], 1.0, ".2f") for k, kind, _ in cols])
    return rows


def diagnostic_tables(summary: dict) -> list[Table]:
    tables: list[Table] = []
    for attack, d in summary.get("text", {}).items():
        name = NAMES.get(attack, attack)
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
    head, rows = table_rows(summary)
    return [("FusionAudit: % of each model's clean-correct set", head, rows)] + diagnostic_tables(summary)
