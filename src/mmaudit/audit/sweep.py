"""Stability of MANTIS: seeds x step budgets x eps, and the paper's three summaries.

One MANTIS run per (model, seed, eps) at the largest budget serves every
smaller one: at each budget in ``steps`` every still-active sample gets the full
check a run of that budget ends with (``PixelAttack.checkpoints``), so the
flips at budget k are exactly those of a separate k-step run.

Summaries (paper, "Pixel Pathway: Stability"):

* median standard deviation of ASR across seeds (sample std, ddof = 1), over
  models, at the main setting (largest eps, 40 steps or the nearest budget) and
  over every setting;
* per level, the gain in mean ASR from 40 to 50 steps at the largest eps;
* per eps, the order of the L1/L2/L3 level means (at 40 steps) and whether it
  is the same at every eps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmaudit.audit.config import AuditConfig
from mmaudit.audit.driver import Progress, unit_runner
from mmaudit.audit.executors import LocalExecutor
from mmaudit.audit.plan import AuditPlan, Unit, chunks_of, correct_set
from mmaudit.audit.units import sweep_attack
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM
from mmaudit.pathways.wrong import OcrReader
from mmaudit.store import RunStore, key_of


@dataclass
class SweepConfig:
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: list[int] = field(default_factory=lambda: [10, 20, 30, 40, 50])
    eps: list[float] = field(default_factory=lambda: [2 / 255, 4 / 255, 8 / 255])
    batch: int = 32
    early_stop: bool = True
    max_new_tokens: int = 16


def sweep_units(plan: AuditPlan, fingerprint: str, store: RunStore, run: dict) -> list[Unit]:
    """One (seed, eps) run over the model's clean-correct set, in the plan's fixed chunks."""
    params = sweep_attack(run).params()
    return [Unit("sweep", tuple(s.id for s in chunk),
                 tuple(key_of(kind="sweep", model=fingerprint, sample=sample_fingerprint(s), attack=params,
                              wrong=s.meta.get("wrong_answer")) for s in chunk), "mantis")
            for chunk in chunks_of(correct_set(store, fingerprint, plan.samples), plan.cfg.batch)]


def run_sweep(models: list[VLM], samples: list[Sample], out: Path, cfg: SweepConfig, judge: Judge | None = None,
              progress: Progress | None = None, pool: list[Sample] | None = None,
              ocr: OcrReader | None = None) -> RunStore:
    """MANTIS over every (seed, eps) on each model's clean-correct set; wrong answers fixed as an audit's plan
    fixes them (``pool``'s vocabulary, the image's ``ocr`` text). Units run through the audit's executor (a unit
    that runs out of memory is halved) and land in the store as they finish."""
    judge = judge or Judge()
    plan = AuditPlan.build(samples, AuditConfig(attacks=["mantis"], batch=cfg.batch), pool=pool, ocr=ocr, judge=judge)
    out = Path(out)
    store = RunStore(out / "results.jsonl")
    executor = LocalExecutor(models, plan, judge)
    run = unit_runner(executor, store, out, progress)
    budgets = sorted(cfg.steps)
    for k, meta in enumerate(executor.metas()):
        fp, name = meta["fingerprint"], meta["model"]
        run(k, plan.clean_units(fp), f"{name} clean")
        for seed in cfg.seeds:
            for eps in cfg.eps:
                settings = {"seed": seed, "eps": eps, "budgets": budgets, "early_stop": cfg.early_stop,
                            "max_new_tokens": cfg.max_new_tokens}
                run(k, sweep_units(plan, fp, store, settings), f"{name} MANTIS sweep (seed {seed}, eps "
                    f"{eps * 255:.0f}/255)", lambda u, settings=settings: (settings,))
    return store


def _nearest(values: list, target):
    return min(values, key=lambda v: (abs(v - target), -v))


def summarise_sweep(store: RunStore, cfg: SweepConfig) -> dict:
    """ASR per model, seed, eps and budget (denominator: the model's clean-correct set), and the summaries."""
    n_correct = defaultdict(int)
    meta = {}
    for r in store.records("clean"):
        n_correct[r["fingerprint"]] += bool(r["correct"])
        meta[r["fingerprint"]] = (r["model"], r["level"])
    flips: dict = defaultdict(lambda: defaultdict(int))  # (fp, seed, eps) -> budget -> count
    for r in store.records("sweep"):
        if r["seed"] in cfg.seeds and any(np.isclose(r["eps"], e) for e in cfg.eps):
            for b, f in r["flipped_at"].items():
                flips[(r["fingerprint"], r["seed"], float(r["eps"]))][int(b)] += f
    budgets, eps_list = sorted(cfg.steps), sorted(cfg.eps)
    asr = {}  # fp -> array (seed, eps, budget)
    for fp in meta:
        a = np.full((len(cfg.seeds), len(eps_list), len(budgets)), np.nan)
        for i, seed in enumerate(cfg.seeds):
            for j, eps in enumerate(eps_list):
                got = next((v for (f, s, e), v in flips.items() if f == fp and s == seed and np.isclose(e, eps)), None)
                if got is not None and n_correct[fp]:
                    a[i, j] = [got.get(b, 0) / n_correct[fp] for b in budgets]
        asr[fp] = a
    main_b, main_e = budgets.index(_nearest(budgets, 40)), len(eps_list) - 1
    ddof = 1 if len(cfg.seeds) > 1 else 0
    std_main = [float(np.std(a[:, main_e, main_b], ddof=ddof)) for a in asr.values()]
    std_all = [float(s) for a in asr.values() for s in np.std(a, axis=0, ddof=ddof).ravel()]
    levels = sorted({lv for _, lv in meta.values()})
    level_mean = {lv: np.nanmean([a.mean(0) for fp, a in asr.items() if meta[fp][1] == lv], axis=0) for lv in levels}
    gain = None
    if 40 in budgets and 50 in budgets:
        gain = {lv: float(m[main_e, budgets.index(50)] - m[main_e, budgets.index(40)]) for lv, m in level_mean.items()}
    order = {}
    for j, eps in enumerate(eps_list):
        ranked = sorted(levels, key=lambda lv: -level_mean[lv][j, main_b])
        order[f"{eps * 255:.0f}/255"] = " > ".join(ranked)
    return {
        "budgets": budgets, "eps": [f"{e * 255:.0f}/255" for e in eps_list], "seeds": cfg.seeds,
        "models": [{"model": meta[fp][0], "level": meta[fp][1], "n_correct": n_correct[fp],
                    "asr_mean": a.mean(0).tolist(), "asr_std": np.std(a, axis=0, ddof=ddof).tolist()}
                   for fp, a in sorted(asr.items(), key=lambda kv: meta[kv[0]][::-1])],
        "levels": {lv: m.tolist() for lv, m in level_mean.items()},
        "median_std_main": float(np.median(std_main)) if std_main else float("nan"),
        "median_std_all": float(np.median(std_all)) if std_all else float("nan"),
        "main_setting": {"eps": f"{eps_list[main_e] * 255:.0f}/255", "steps": budgets[main_b]},
        "gain_40_to_50": gain, "level_order": order, "order_holds": len(set(order.values())) == 1,
    }
