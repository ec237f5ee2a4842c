"""Aggregate judged QIMG-7 answers as the paper does: TC, TP, Drop, Balanced.

Per question, the 8 image states of each text condition are averaged (TC_* and
TP_* regimes); questions are averaged within a dataset; datasets are averaged
without weights. On complete data this equals the release's order (regime
means first), since every question then has one row per regime.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from mmaudit.errors import FolderError, InputError, json_reason

LABEL_SCORES = {"supported": 1.0, "partially_supported": 0.5, "uncertain": 0.25, "unsupported": 0.0}


def judged_files(root: Path, stack: str | None = None) -> dict[str, list[Path]]:
    """``root/evaluation/judged/<stack>/<dataset>/*.judged*.jsonl`` grouped by dataset."""
    base = root / "evaluation" / "judged"
    if not base.is_dir():
        raise FolderError(str(root), "judged", f"no folder {base}")
    stacks = sorted(p.name for p in base.iterdir() if p.is_dir())
    if stack is None:
        if len(stacks) != 1:
            raise FolderError(str(root), "stack", f"choose one of {stacks} with --stack")
        stack = stacks[0]
    if stack not in stacks:
        raise FolderError(str(root), "stack", f"{stack!r} not found; stacks: {stacks}")
    out: dict[str, list[Path]] = {}
    for d in sorted((base / stack).iterdir()):
        files = sorted(d.glob("*.judged*.jsonl"))
        if d.is_dir() and files:
            out[d.name] = files
    return out


def row_score(row: dict, where: str) -> float:
    if isinstance(row.get("score"), (int, float)):
        return float(row["score"])
    if row.get("label") in LABEL_SCORES:
        return LABEL_SCORES[row["label"]]
    raise InputError(where, "score", f"neither a numeric score nor a known label: {row.get('label')!r}")


def load_rows(files: list[Path]) -> dict[str, list[dict]]:
    """Rows per method (the files' ``baseline`` value)."""
    by_method: dict[str, list[dict]] = defaultdict(list)
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if not line.strip():
                continue
            where = f"{f.name}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(where, "line", json_reason(e)) from e
            for key in ("qid", "regime", "baseline"):
                if key not in row:
                    raise InputError(where, key, "missing")
            if row.get("error"):  # its requests failed: no verdict to score (the run counts and reports it)
                continue
            row["_score"] = row_score(row, where)
            by_method[row["baseline"]].append(row)
    return by_method


def question_means(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per question: mean score over its TC_* rows and over its TP_* rows."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"TC": [], "TP": []})
    for r in rows:
        cond = str(r["regime"])[:2]
        if cond in ("TC", "TP"):
            acc[str(r["qid"])][cond].append(r["_score"])
    return {q: {c: float(np.mean(v)) if v else float("nan") for c, v in d.items()} for q, d in acc.items()}


def dataset_scores(rows: list[dict]) -> dict[str, float]:
    qm = question_means(rows)
    tc = float(np.nanmean([m["TC"] for m in qm.values()]))
    tp = float(np.nanmean([m["TP"] for m in qm.values()]))
    return {"tc": tc, "tp": tp, "drop": tc - tp, "balanced": (tc + tp) / 2, "n_questions": len(qm)}


def judged_rows(root: Path, stack: str | None = None) -> dict[str, dict[str, list[dict]]]:
    """method -> dataset -> judged rows (with ``_score``)."""
    per: dict[str, dict[str, list[dict]]] = defaultdict(dict)
    for dataset, files in judged_files(root, stack).items():
        for method, rows in load_rows(files).items():
            per[method][dataset] = rows
    return dict(per)


def main_table(root: Path, stack: str | None = None) -> list[dict]:
    """One row per method: TC, TP, Drop, Balanced, macro-averaged over the datasets found."""
    return main_rows(judged_rows(root, stack))


def main_rows(judged: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """:func:`main_table` of judged rows already read (method -> dataset -> rows)."""
    per = {m: {ds: dataset_scores(rows) for ds, rows in by.items()} for m, by in judged.items()}
    table = []
    for method in sorted(per):
        ds = per[method]
        row = {"method": method}
        for k in ("tc", "tp", "drop", "balanced"):
            row[k] = float(np.mean([d[k] for d in ds.values()]))
        row["datasets"] = sorted(ds)
        table.append(row)
    return table


METRICS = ("tc", "tp", "drop", "balanced")


def _question_arrays(per: dict[str, dict[str, list[dict]]]) -> tuple[dict, dict]:
    """Per dataset the sorted question ids, and per method/dataset the (Q, 2) TC/TP question means."""
    qids = {ds: sorted({str(r["qid"]) for m in per.values() for r in m.get(ds, [])})
            for ds in sorted({d for m in per.values() for d in m})}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for method, by_ds in per.items():
        arrays[method] = {}
        for ds, rows in by_ds.items():
            qm = question_means(rows)
            arrays[method][ds] = np.array([[qm.get(q, {}).get("TC", np.nan), qm.get(q, {}).get("TP", np.nan)]
                                           for q in qids[ds]])
    return qids, arrays


def _metrics(tc: np.ndarray, tp: np.ndarray) -> dict[str, np.ndarray]:
    return {"tc": tc, "tp": tp, "drop": tc - tp, "balanced": (tc + tp) / 2}


def clustered_bootstrap(per: dict[str, dict[str, list[dict]]], n_boot: int = 10_000, seed: int = 0,
                        pairs: list[tuple[str, str]] | None = None, alpha: float = 0.05) -> dict:
    """Question-clustered paired bootstrap (Section 5): question ids are resampled with replacement within
    each dataset, the same draw for every method (paired), every question keeping all its 16 regimes
    (its TC and TP means are computed from them first); each replicate is aggregated exactly as the point
    estimate (datasets unweighted). Returns per-method CIs and, for ``pairs`` (a, b), CIs of a - b."""
    qids, arrays = _question_arrays(per)
    rng = np.random.default_rng(seed)
    reps: dict[str, dict[str, np.ndarray]] = {m: {k: np.zeros(n_boot) for k in METRICS} for m in per}
    point: dict[str, dict[str, float]] = {}
    for m in per:
        tc = np.mean([np.nanmean(arrays[m][ds][:, 0]) for ds in arrays[m]])
        tp = np.mean([np.nanmean(arrays[m][ds][:, 1]) for ds in arrays[m]])
        point[m] = {k: float(v) for k, v in _metrics(tc, tp).items()}
    for ds, q in qids.items():
        idx = rng.integers(0, len(q), size=(n_boot, len(q)))
        w = np.stack([np.bincount(row, minlength=len(q)) for row in idx]).astype(float) / len(q)  # (B, Q)
        for m in per:
            a = arrays[m][ds]
            tc, tp = w @ np.nan_to_num(a[:, 0]), w @ np.nan_to_num(a[:, 1])
            for k, v in _metrics(tc, tp).items():
                reps[m][k] += v / len(arrays[m])

    def ci(values: np.ndarray, pt: float) -> tuple[float, float, float]:
        lo, hi = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        return pt, float(lo), float(hi)

    out = {"methods": {m: {k: ci(reps[m][k], point[m][k]) for k in METRICS} for m in per},
           "replicates": n_boot, "seed": seed, "resampled": "question ids within each dataset, all regimes kept"}
    out["deltas"] = {f"{a} - {b}": {k: ci(reps[a][k] - reps[b][k], point[a][k] - point[b][k]) for k in METRICS}
                     for a, b in (pairs or [])}
    return out
