"""Tables and reports rebuilt from the run store alone (FusionAudit Table 1 shape)."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from mmaudit.pathways.pixel import ATTACKS, BASELINES, ENHANCED
from mmaudit.stats import ModelFlags, bootstrap_level_ci, model_summary, rank_agreement, union
from mmaudit.store import RunStore

NAMES = {"vis_pgd": "Vis-PGD", "end_pgd": "End-PGD", "mantis": "MANTIS"}


def model_flags(store: RunStore, attack_params: dict[str, dict] | None = None) -> list[ModelFlags]:
    """Per model, aligned per-question flags; attack records are kept only if their params match."""
    clean: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in store.records("clean"):
        clean[r["fingerprint"]][r["sample"]] = r
    flips: dict[str, dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for r in store.records("attack"):
        if attack_params and attack_params.get(r["attack"]) != r["params"]:
            continue
        flips[r["fingerprint"]][r["attack"]][r["sample"]] = r["flipped"]
    out = []
    for fp, rows in clean.items():
        questions = sorted(rows)
        first = rows[questions[0]]
        correct = np.array([rows[q]["correct"] for q in questions])
        names = list(attack_params) if attack_params else list(flips[fp])  # asked-for attacks show even if C is empty
        flipped = {a: np.array([flips[fp][a].get(q, False) for q in questions]) for a in names}
        out.append(ModelFlags(first["model"], first["level"], questions, correct, flipped))
    return sorted(out, key=lambda m: (m.level, m.model))


def summarise(store: RunStore, attack_params: dict[str, dict] | None = None, n_boot: int = 10_000,
              seed: int = 0) -> dict:
    models = model_flags(store, attack_params)
    present = {a for m in models for a in m.flipped}
    attacks = [a for a in ATTACKS if a in present] + sorted(present - set(ATTACKS))
    baselines = [a for a in BASELINES if a in attacks]
    enhanced = {e: b for e, b in ENHANCED.items() if e in attacks}
    rows = [model_summary(m, baselines, enhanced) for m in models]
    passes: dict[str, list[int]] = defaultdict(list)
    for r in store.records("attack"):
        if not attack_params or attack_params.get(r["attack"]) == r["params"]:
            passes[r["attack"]].append(r["passes"])
    metrics = {f"asr_{a}": (lambda m, a=a: m.flipped[a]) for a in attacks}
    metrics["r0"] = lambda m: union(m, baselines)
    metrics["r_plus"] = lambda m: union(m, attacks)
    for e, base in enhanced.items():
        metrics[f"delta_{e}"] = lambda m, e=e, base=base: m.flipped[e] & ~union(m, base)
    levels = {}
    for level in sorted({m.level for m in models}):
        group = [m for m in models if m.level == level]
        levels[level] = {"n_models": len(group)} | {
            k: bootstrap_level_ci(group, f, n_boot=n_boot, seed=seed) for k, f in metrics.items()
        }
    ranking = None
    if "end_pgd" in attacks and len(rows) > 1:
        ranking = rank_agreement({r["model"]: r["asr"]["end_pgd"] for r in rows},
                                 {r["model"]: r["r_plus"] for r in rows})
    errors = [{"sample": r["sample"], "field": r["field"], "reason": r["reason"]} for r in store.records("error")]
    return {
        "attacks": attacks, "baselines": baselines, "enhanced": {e: list(b) for e, b in enhanced.items()},
        "models": rows, "levels": levels, "ranking": ranking, "errors": errors,
        "mean_passes": {a: float(np.mean(v)) for a, v in passes.items()},
        "bootstrap": {"replicates": n_boot, "seed": seed, "resampled": "questions, models fixed"},
    }


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}"


def ci(t) -> str:
    point, lo, hi = t
    return f"{pct(point)} [{pct(lo)}, {pct(hi)}]"


def table_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    attacks, enhanced = summary["attacks"], list(summary["enhanced"])
    head = ["model", "level", "clean", "|C|"] + [NAMES.get(a, a) for a in attacks] + ["R0", "R+"] + \
        [f"δ {NAMES.get(e, e)}" for e in enhanced]
    rows = []
    for r in summary["models"]:
        rows.append([r["model"], r["level"], pct(r["clean_acc"]), str(r["n_correct"])]
                    + [pct(r["asr"][a]) for a in attacks] + [pct(r["r0"]), pct(r["r_plus"])]
                    + [pct(r["delta"][e]) for e in enhanced])
    for level, m in summary["levels"].items():
        rows.append([f"{level} macro ({m['n_models']} models)", level, "", ""]
                    + [ci(m[f"asr_{a}"]) for a in attacks] + [ci(m["r0"]), ci(m["r_plus"])]
                    + [ci(m[f"delta_{e}"]) for e in enhanced])
    return head, rows


def write_report(summary: dict, out: Path, notes: list[str] | None = None) -> Path:
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    head, rows = table_rows(summary)
    lines = ["# FusionAudit report", "", "Clean: % of all questions answered correctly. Attack columns (ASR), R0, R+ "
             "and δ (flipped by the enhanced attack and by none of its baselines): % of each model's clean-correct "
             "set C. Level rows: unweighted "
             "macro mean with a 95% bootstrap CI (questions resampled, models fixed, "
             f"{summary['bootstrap']['replicates']} replicates, seed {summary['bootstrap']['seed']}).", ""]
    lines += notes or []
    lines += ["", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(html.escape(c) for c in row) + " |" for row in rows]
    if summary["ranking"]:
        rk = summary["ranking"]
        lines += ["", f"End-PGD vs R+ ranking over {rk['n_models']} models: Spearman rho {rk['spearman_rho']:.3f}, "
                  f"Kendall tau-b {rk['kendall_tau_b']:.3f}, {rk['n_moved']} moved three or more places."]
    lines += ["", "Mean model passes per clean-correct sample: "
              + ", ".join(f"{a} {v:.1f}" for a, v in summary["mean_passes"].items())]
    lines += ["", f"Errors (samples that could not be audited): {len(summary['errors'])}"]
    lines += [f"- `{html.escape(e['sample'])}` {html.escape(e['field'])}: {html.escape(e['reason'])}"
              for e in summary["errors"]]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
