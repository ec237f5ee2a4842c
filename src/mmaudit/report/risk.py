"""Risk tables (FusionAudit Table 1 shape) rebuilt from the run store alone."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.pathways import registry
from mmaudit.stats import ModelFlags, bootstrap_level_ci, model_summary, rank_agreement, union
from mmaudit.store import RunStore


def wanted(record: dict, attack_params: dict[str, dict | list[dict]] | None) -> bool:
    """Whether an attack record was made with the parameters this report is about (an attack made with several,
    such as one surrogate ensemble per target, lists them)."""
    if not attack_params:
        return True
    asked = attack_params.get(record["attack"])
    return asked == record["params"] or (isinstance(asked, list) and record["params"] in asked)


def model_flags(store: RunStore, attack_params: dict[str, dict] | None = None) -> list[ModelFlags]:
    """Per model, aligned per-question flags; attack records are kept only if their params match."""
    return sorted(flags_by_fingerprint(store, attack_params).values(), key=lambda m: (m.level, m.model))


def flags_by_fingerprint(store: RunStore, attack_params: dict[str, dict] | None = None) -> dict[str, ModelFlags]:
    """:func:`model_flags` keyed by each model's fingerprint."""
    clean: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in store.records("clean"):
        clean[r["fingerprint"]][r["sample"]] = r
    flips: dict[str, dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for r in store.records("attack"):
        if wanted(r, attack_params):
            flips[r["fingerprint"]][r["attack"]][r["sample"]] = r["flipped"]
    not_run: dict[str, dict[str, str]] = defaultdict(dict)  # attacks a model could not take (a black-box target)
    for r in store.records("not_run"):
        if r["attack"] not in flips[r["fingerprint"]] and wanted(r, attack_params):
            not_run[r["fingerprint"]][r["attack"]] = r["reason"]
    out = {}
    for fp, rows in clean.items():
        questions = sorted(rows)
        first = rows[questions[0]]
        correct = np.array([rows[q]["correct"] for q in questions])
        # asked-for attacks show even if C is empty; a transfer-only attack is the transfer tables' business
        names = [a for a in (attack_params or flips[fp])
                 if not (registry.known(a) and registry.spec(a).transfer_only)]
        flipped = {a: np.array([flips[fp][a].get(q, False) for q in questions]) for a in names}
        out[fp] = ModelFlags(first["model"], first["level"], questions, correct, flipped, not_run.get(fp, {}))
    return out


def risk_summary(store: RunStore, attack_params: dict[str, dict] | None, n_boot: int, seed: int) -> dict:
    models = model_flags(store, attack_params)
    present = {a for m in models for a in m.flipped}
    known = registry.names()
    attacks = [a for a in known if a in present] + sorted(present - set(known))
    baselines = [a for a in registry.baselines() if a in attacks]
    enhanced = {e: tuple(b for b in base if b in attacks) for e, base in registry.enhanced().items() if e in attacks}
    rows = [model_summary(m, baselines, enhanced) for m in models]
    passes: dict[str, list[int]] = defaultdict(list)
    failed: dict[str, int] = defaultdict(int)
    schedule = "full"
    for r in store.records("attack"):
        if wanted(r, attack_params):
            passes[r["attack"]].append(r["passes"])
            failed[r["attack"]] += bool(r.get("error")) and not r.get("reply_error")  # replies: under errors
            schedule = r["params"].get("schedule", schedule)
    metrics = {f"asr_{a}": (lambda m, a=a: m.flipped[a]) for a in attacks}
    metrics["r0"] = lambda m: union(m, baselines)
    metrics["r_plus"] = lambda m: union(m, attacks)
    for e, base in enhanced.items():
        metrics[f"delta_{e}"] = lambda m, e=e, base=base: m.flipped[e] & ~union(m, base)
    levels = {}
    for level in sorted({m.level for m in models}):
        group = [m for m in models if m.level == level]
        levels[level] = {"n_models": len(group)} | {
            k: (float("nan"),) * 3 if all(k.partition("_")[2] in m.not_run for m in group)
            else bootstrap_level_ci(group, f, n_boot=n_boot, seed=seed) for k, f in metrics.items()
        }
        levels[level]["gap"] = bootstrap_level_ci(group, metrics["r_plus"], n_boot=n_boot, seed=seed,
                                                  minus=metrics["r0"])
    coverage = suite_coverage(attacks, baselines, enhanced)
    for row in rows:  # what the run cannot measure is not a 0: null in JSON, "not measured" in tables
        if "gap" in coverage["not_measured"]:
            row["gap"] = float("nan")
        row["delta"] = {e: (float("nan") if f"delta_{e}" in coverage["not_measured"] else v)
                        for e, v in row["delta"].items()}
    for m in levels.values():
        for key in coverage["not_measured"]:
            if key in m:
                m[key] = (float("nan"),) * 3
    ranking = None
    ranked = [r for r in rows if "end_pgd" in r["asr"] and "end_pgd" not in r.get("not_run", {})]
    if len(ranked) > 1:
        ranking = rank_agreement({r["model"]: r["asr"]["end_pgd"] for r in ranked},
                                 {r["model"]: r["r_plus"] for r in ranked}, moved_by=moved_threshold(len(ranked)))
    return {
        "attacks": attacks, "baselines": baselines, "enhanced": {e: list(b) for e, b in enhanced.items()},
        "coverage": coverage, "models": rows, "levels": levels, "ranking": ranking, "schedule": schedule,
        "mean_passes": {a: float(np.mean(v)) for a, v in passes.items()
                        if registry.known(a) and registry.spec(a).counts_passes},
        "edit_failures": {a: n for a, n in failed.items() if n},
    }


def suite_coverage(attacks: list[str], baselines: list[str], enhanced: dict[str, tuple[str, ...]]) -> dict:
    """Which attacks each union covers and what a partial suite cannot measure: the gap R+ - R0 needs an enhanced
    attack (without one it is 0 by construction), and an enhanced attack's delta needs all of its baselines."""
    missing = [a for a in registry.default_suite() if a not in attacks]
    declared = registry.enhanced()
    not_measured = [] if any(e in attacks for e in declared) else ["gap"]
    not_measured += [f"delta_{e}" for e, base in declared.items()
                     if e in attacks and set(base) - set(enhanced.get(e, ()))]
    return {"r0": list(baselines), "r_plus": list(attacks), "missing": missing, "partial": bool(missing),
            "not_measured": not_measured}


def moved_threshold(n_models: int) -> int:
    """How many places a model must move between the End-PGD and the R+ ranking to count as moved: the paper's 3,
    scaled down where there are too few models to move that far (n models move at most n - 1 places)."""
    return max(1, min(3, n_models - 2))
