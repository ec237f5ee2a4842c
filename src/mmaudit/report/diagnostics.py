"""Diagnostic tables rebuilt from the store: RUG, OAR, evidence preservation, layer recovery, examples.

Level rows are unweighted means over the level's models with percentile
bootstrap CIs (:func:`mmaudit.stats.bootstrap_groups`: each model's samples
resampled, models fixed).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.pathways import registry
from mmaudit.report.risk import wanted
from mmaudit.stats import bootstrap_groups
from mmaudit.store import RunStore


def _mean(col: int):
    return lambda g: float(g[:, col].mean())


def _by_model(records) -> dict[tuple[str, str, str], list[dict]]:
    out: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in records:
        out[(r["level"], r["model"], r["fingerprint"])].append(r)
    return dict(sorted(out.items()))


def _table(groups: dict[tuple[str, str], np.ndarray], stats: dict[str, object], n_boot: int, seed: int,
           model_ci: tuple[str, ...] = ()) -> dict:
    """Per model and per level, each named statistic of the (n, k) per-sample arrays; the statistics named in
    ``model_ci`` also get each model's own percentile CI (``<name>_ci``: its samples resampled), for plots."""
    models, levels = [], {}
    for (level, model), g in groups.items():
        models.append({"model": model, "level": level, "n": len(g)}
                      | {k: (f(g) if len(g) else float("nan")) for k, f in stats.items()}
                      | {f"{k}_ci": list(bootstrap_groups([g], stats[k], n_boot, seed)[1:]) for k in model_ci})
    for level in sorted({lv for lv, _ in groups}):
        gs = [g for (lv, _), g in groups.items() if lv == level]
        levels[level] = {"n_models": len(gs)} | {k: bootstrap_groups(gs, f, n_boot, seed) for k, f in stats.items()}
    return {"models": models, "levels": levels}


def text_diagnostics(store: RunStore, attack_params: dict | None, n_boot: int, seed: int) -> dict:
    out = {}
    for attack in registry.names("text"):
        recs = [r for r in store.records("attack") if r["attack"] == attack and wanted(r, attack_params)
                and not r.get("error")]
        if not recs:
            continue
        by = _by_model(recs)
        rug = {(lv, m): np.array([[r["read"], r["used"]] for r in rs], float) for (lv, m, _), rs in by.items()}
        oar = {(lv, m): np.array([[r["oar"], r["oar_clean"]] for r in rs], float) for (lv, m, _), rs in by.items()
               if all(r.get("oar") is not None for r in rs)}  # a black-box target shows no attention
        mask = {(lv, m): np.array([[r["mask_restored"]] for r in rs if r["flipped"]], float).reshape(-1, 1)
                for (lv, m, _), rs in by.items()}
        out[attack] = {
            "rug": _table(rug, {"p_read": _mean(0), "p_use": _mean(1),
                                "rug": lambda g: float(g[:, 0].mean() - g[:, 1].mean())}, n_boot, seed,
                          model_ci=("p_read", "p_use")),
            "oar": _table(oar, {"oar": _mean(0), "oar_clean": _mean(1),
                                "increase": lambda g: float(g[:, 0].mean() / g[:, 1].mean() - 1)}, n_boot, seed,
                          model_ci=("oar", "oar_clean")),
            "mask_restored": _table(mask, {"rate": _mean(0)}, n_boot, seed),
        }
    return out


def recovery_summary(store: RunStore, n_boot: int, seed: int) -> dict:
    recs = list(store.records("recovery"))
    by = _by_model(recs)
    groups = {(lv, m): np.array([[r["recovered"]] for r in rs if r["reproduced"]], float).reshape(-1, 1)
              for (lv, m, _), rs in by.items()}
    table = _table(groups, {"rate": _mean(0)}, n_boot, seed)
    for row, ((_, _, _), rs) in zip(table["models"], by.items()):
        kept = [r for r in rs if r["reproduced"]]
        n_layers = max((len(r["answers_by_layer"]) for r in kept), default=0)
        row["flips_tried"] = len(rs)
        row["by_layer"] = [float(np.mean([layer in r["recovered_layers"] for r in kept])) if kept else float("nan")
                           for layer in range(n_layers)]
    excluded = [{"model": r["model"], "level": r["level"], "reason": r["reason"]}
                for r in store.records("recovery_excluded")]
    positions = sorted({r["positions"] for r in recs})
    return table | {"excluded": excluded, "positions": positions}


def ocr_summary(store: RunStore) -> dict:
    """The OCR evidence check over every attack that asked for it, and per attack (``attacks``)."""
    recs = list(store.records("ocr"))
    unavailable = [r["reason"] for r in store.records("ocr_unavailable")]
    by: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        by[r.get("attack", "nat_evid")].append(r)  # records made before the attack was named are Nat-Evid's
    return _ocr_counts(recs) | {"unavailable": unavailable,
                                "attacks": {a: _ocr_counts(by[a]) for a in sorted(by, key=registry.table_rank)}}


def _ocr_counts(recs: list[dict]) -> dict:
    readable = [r for r in recs if r["clean_reads"]]
    kept = sum(r["edited_reads"] for r in readable)
    return {"checked": len(recs), "readable_on_clean": len(readable), "still_read": kept,
            "rate": kept / len(readable) if readable else float("nan")}


def examples(store: RunStore, attack_params: dict | None, per_attack: int = 3) -> dict[str, list[dict]]:
    """A few flips per attack with the clean and attacked image and answers: one per model and attack, and each
    sample shown once across the gallery while other flips remain to show (the report's "All flips" browser has
    every flip)."""
    clean = {(r["fingerprint"], r["sample"]): r for r in store.records("clean")}
    out: dict[str, list[dict]] = defaultdict(list)
    flips = sorted((r for r in store.records("attack") if r["flipped"] and wanted(r, attack_params)),
                   key=lambda r: (r["level"], r["model"], r["sample"]))
    shown: set[str] = set()
    for distinct in (True, False):  # first samples not shown yet, then whatever fills the gallery
        for r in flips:
            if len(out[r["attack"]]) >= per_attack or any(e["model"] == r["model"] for e in out[r["attack"]]):
                continue
            if distinct and r["sample"] in shown:
                continue
            shown.add(r["sample"])
            c = clean.get((r["fingerprint"], r["sample"]), {})
            out[r["attack"]].append({"model": r["model"], "sample": r["sample"], "question": r.get("question", ""),
                                     "reference": r["reference"], "clean_answer": c.get("answer", ""),
                                     "clean_image": c.get("image"), "attacked_image": r.get("image"),
                                     "attacked_answer": r["answer"], "overlay": r.get("overlay"), "box": r.get("box"),
                                     "eps": r["params"].get("eps"), "linf": r.get("linf"),
                                     "oar": r.get("oar"), "attention_map": r.get("attention_map")})
    return dict(out)
