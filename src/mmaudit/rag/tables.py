"""The paper's QIMG-7 tables from judged rows: attack family, channel isolation, decisions, route accuracy."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.rag.records import IMAGE_ATTACKS

BRANCH_METHODS = ("parametric", "text_only", "full_mm")


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
    """TC_IC, TC_IP (mean of the seven), TP_IC, TP_IP per method (Table 15)."""
    out = {}
    for m, by in per.items():
        cells = {}
        for name, test in (("TC_IC", lambda g: g == "TC_IC"), ("TC_IP", lambda g: g.startswith("TC_IP")),
                           ("TP_IC", lambda g: g == "TP_IC"), ("TP_IP", lambda g: g.startswith("TP_IP"))):
            cells[name] = _macro({ds: [r["_score"] for r in rows if test(r["regime"])] for ds, rows in by.items()})
        out[m] = cells
    return out


def decisions(per: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Share of each route under clean and polluted text (Table 14)."""
    out = {}
    for m, by in per.items():
        counts: dict[str, defaultdict] = {"TC": defaultdict(int), "TP": defaultdict(int)}
        for rows in by.values():
            for r in rows:
                route = str(r.get("route", "")).split(":")[-1]
                counts[r["regime"][:2]][route] += 1
        out[m] = {g: {k: v / max(1, sum(c.values())) for k, v in sorted(c.items())} for g, c in counts.items()}
    return out


def route_accuracy(per: dict[str, dict[str, list[dict]]]) -> dict[str, float]:
    """Share of rows where a method's answer scores as high as the best of the three branches (the oracle)."""
    best: dict[tuple, float] = {}
    for m in BRANCH_METHODS:
        for rows in per.get(m, {}).values():
            for r in rows:
                k = (r.get("dataset"), str(r["qid"]), r["regime"])
                best[k] = max(best.get(k, -1.0), r["_score"])
    out = {}
    for m, by in per.items():
        hits = [r["_score"] >= best[(r.get("dataset"), str(r["qid"]), r["regime"])]
                for rows in by.values() for r in rows if (r.get("dataset"), str(r["qid"]), r["regime"]) in best]
        out[m] = float(np.mean(hits)) if hits else float("nan")
    return out
