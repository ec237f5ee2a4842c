"""The paper's QIMG-7 tables from judged rows: attack family, channel isolation, decisions, route accuracy."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from mmaudit.rag.construct.records import IMAGE_ATTACKS
from mmaudit.rag.evaluate.methods import BRANCH_METHODS
from mmaudit.rag.evaluate.routers import route_source


def _macro(per_ds: dict[str, list[float]]) -> float:
    vals = [float(np.mean(v)) for v in per_ds.values() if v]
    return float(np.mean(vals)) if vals else float("nan")


def attack_family(per: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, float]]:
    """Polluted-text score by image attack (Table 4): mean over TP_IP_<attack> rows, macro over datasets."""
    out = {}
    for m, by in per.items():
        out[m] = {a: _macro({ds: [r["_score"] for r in rows if r["regime"] == f"TP_IP_{a}"] for ds, rows in by.items()})
                  for a in IMAGE_ATTACKS}
    return out


def channel_isolation(per: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, float]]:
    """Table 15 (G.4): TC_IC, TC_IP (mean of the seven attacks), TP_IC, TP_IP per method, and the two effects:
    image effect = TC_IC - mean TC_IP, text effect = TC_IC - TP_IC (from unrounded scores)."""
    out = {}
    for m, by in per.items():
        cells = {}
        for name, test in (("TC_IC", lambda g: g == "TC_IC"), ("TC_IP", lambda g: g.startswith("TC_IP")),
                           ("TP_IC", lambda g: g == "TP_IC"), ("TP_IP", lambda g: g.startswith("TP_IP"))):
            cells[name] = _macro({ds: [r["_score"] for r in rows if test(r["regime"])] for ds, rows in by.items()})
        cells["image_effect"] = cells["TC_IC"] - cells["TC_IP"]
        cells["text_effect"] = cells["TC_IC"] - cells["TP_IC"]
        out[m] = cells
    return out


NOT_AVAILABLE = "not available (the judged files carry no route fields)"


def has_routes(by: dict[str, list[dict]]) -> bool:
    """Whether a method's judged rows say which route they took (a layout rebuilt from per-regime results may
    not: then its decisions and route accuracy are not available, rather than 100% of nothing)."""
    return any(r.get("route") for rows in by.values() for r in rows)


def decisions(per: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, dict[str, float]] | None]:
    """Share of each route under clean and polluted text (Table 14); None where the rows carry no route."""
    out: dict[str, dict[str, dict[str, float]] | None] = {}
    for m, by in per.items():
        if not has_routes(by):
            out[m] = None
            continue
        counts: dict[str, defaultdict] = {"TC": defaultdict(int), "TP": defaultdict(int)}
        for rows in by.values():
            for r in rows:
                route = str(r.get("route", "")).split(":")[-1]
                counts[r["regime"][:2]][route] += 1
        out[m] = {g: {k: v / max(1, sum(c.values())) for k, v in sorted(c.items())} for g, c in counts.items()}
    return out


def route_accuracy(per: dict[str, dict[str, list[dict]]], ties: str = "any") -> dict[str, dict[str, float]]:
    """G.10: share of rows whose route is the oracle's branch, per dataset and macro ("overall").

    The oracle takes the highest-scoring of the Parametric, Text-only and Full-MM answers of the row; where
    several tie at the best score, ``ties="any"`` accepts any of them, ``"first"`` only the first in that order.
    Branch methods themselves are left out (their route is their branch by definition)."""
    if ties not in ("any", "first"):
        raise ValueError(f"ties must be 'any' or 'first', got {ties!r}")
    scores: dict[tuple, dict[str, float]] = defaultdict(dict)
    for b in BRANCH_METHODS:
        for ds, rows in per.get(b, {}).items():
            for r in rows:
                scores[(ds, str(r["qid"]), r["regime"])][b] = r["_score"]
    oracle: dict[tuple, set[str]] = {}
    for k, s in scores.items():
        if len(s) == len(BRANCH_METHODS):
            best = max(s.values())
            tied = [b for b in BRANCH_METHODS if s[b] == best]
            oracle[k] = set(tied) if ties == "any" else {tied[0]}
    out: dict[str, dict[str, float] | None] = {}
    for m, by in per.items():
        if m in BRANCH_METHODS:
            continue
        if not has_routes(by):
            out[m] = None
            continue
        per_ds = {ds: [route_source(r.get("route", "")) in oracle[(ds, str(r["qid"]), r["regime"])]
                       for r in rows if (ds, str(r["qid"]), r["regime"]) in oracle] for ds, rows in by.items()}
        cells = {ds: float(np.mean(v)) if v else float("nan") for ds, v in per_ds.items()}
        out[m] = cells | {"overall": _macro({ds: [float(x) for x in v] for ds, v in per_ds.items()})}
    return out


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}"


def bench_numbers(root: Path, stack: str | None, n_boot: int, seed: int) -> dict:
    """Every number the bench tables and plots show, from the judged files alone: the main table with its
    question-clustered paired bootstrap (Field-Selector as the reference of the paired deltas), the attack
    family, channel isolation, decisions and route accuracy."""
    from mmaudit.rag.evaluate.score import clustered_bootstrap, judged_rows, main_rows

    per = judged_rows(root, stack)
    ref = "field_selector" if "field_selector" in per else None
    pairs = [(ref, m) for m in sorted(per) if ref and m != ref]
    boot = clustered_bootstrap(per, n_boot, seed, pairs=pairs) if n_boot else {"methods": {}, "deltas": {}}
    return {"per": per, "main": main_rows(per), "ref": ref, "cis": boot["methods"],
            "deltas": boot["deltas"], "attack_family": attack_family(per), "channel": channel_isolation(per),
            "decisions": decisions(per), "route_accuracy": route_accuracy(per)}


def bench_tables(root: Path, stack: str | None, n_boot: int, seed: int,
                 numbers: dict | None = None) -> list[tuple[str, list[str], list[list[str]]]]:
    """The bench tables as (title, header, rows) of strings: terminal, report.md and report.html."""
    n = numbers or bench_numbers(root, stack, n_boot, seed)
    cis = n["cis"]

    def cell(m: str, k: str, v: float) -> str:
        return f"{pct(v)} [{pct(cis[m][k][1])}, {pct(cis[m][k][2])}]" if m in cis else pct(v)

    out = [("Main table (support score %, macro over datasets; 95% question-clustered paired bootstrap CIs)",
            ["method", "TC", "TP", "Drop", "Balanced"],
            [[r["method"]] + [cell(r["method"], k, r[k]) for k in ("tc", "tp", "drop", "balanced")]
             for r in n["main"]])]
    if n["deltas"]:
        out.append((f"Paired deltas ({n['ref']} minus each method, points; 95% CIs from the same replicates)",
                    ["pair", "TC", "TP", "Balanced"],
                    [[pair] + [f"{100 * d[k][0]:+.1f} [{100 * d[k][1]:+.1f}, {100 * d[k][2]:+.1f}]"
                               for k in ("tc", "tp", "balanced")] for pair, d in n["deltas"].items()]))
    af = n["attack_family"]
    out.append(("Polluted text by image attack (TP_IP_<attack>, %)", ["method", *IMAGE_ATTACKS],
                [[m] + [pct(af[m][a]) for a in IMAGE_ATTACKS] for m in sorted(af)]))
    ch = n["channel"]
    keys = ("TC_IC", "TC_IP", "image_effect", "TP_IC", "text_effect", "TP_IP")
    out.append(("Channel isolation (%; image effect = TC_IC - mean TC_IP, text effect = TC_IC - TP_IC)",
                ["method", "TC_IC", "TC_IP avg", "image effect", "TP_IC", "text effect", "TP_IP"],
                [[m] + [pct(ch[m][k]) for k in keys] for m in sorted(ch)]))
    dec = n["decisions"]
    out.append(("Decisions (% of rows per route, clean / polluted text)", ["method", "TC", "TP"],
                [[m] + ([", ".join(f"{k} {pct(v)}" for k, v in dec[m][g].items()) for g in ("TC", "TP")]
                        if dec[m] is not None else [NOT_AVAILABLE, ""]) for m in sorted(dec)]))
    ra = n["route_accuracy"]
    datasets = sorted({ds for v in ra.values() if v for ds in v if ds != "overall"})
    out.append(("Route accuracy: the route is the oracle's best branch (%; ties: any best branch)",
                ["method", *datasets, "overall"],
                [[m] + ([pct(ra[m].get(ds, float("nan"))) for ds in (*datasets, "overall")] if ra[m] is not None
                        else [NOT_AVAILABLE] + [""] * len(datasets)) for m in sorted(ra)]))
    return out
