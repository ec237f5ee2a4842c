"""Risk accounting of FusionAudit, computed from per-sample flags only (never re-running models).

Definitions (paper, "Pathway-conditioned risk" and "Experimental Setup"):

* C: a model's clean-correct set; every rate below has |C| as denominator;
* S_a: the samples of C that attack a flips (an error or a missing result is
  not a flip, it is counted apart);
* ASR_a = |S_a| / |C|; R0 = |union of baseline S_a| / |C|; R+ = |union of all S_a| / |C|;
* gap = R+ - R0, the risk the diagnostics expose (the paper's headline per level);
* delta_e = |S_e minus the union of e's baselines| / |C| for an enhanced attack e;
* level means are unweighted means over the models of a level;
* CIs: percentile bootstrap resampling *questions* with replacement, the set of
  models fixed (a question drawn twice counts twice in every model's C); the gap's
  CI is taken on each replicate's R+ - R0 (the paper's fixed-model-pair bootstrap).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps


@dataclass
class ModelFlags:
    """Per question (aligned with ``questions``): clean-correct, and flipped per attack."""

    model: str
    level: str
    questions: list[str]
    correct: np.ndarray  # (Q,) bool
    flipped: dict[str, np.ndarray]  # attack -> (Q,) bool, False outside C
    not_run: dict[str, str] = field(default_factory=dict)  # attack -> why it could not run on this model

    def __post_init__(self) -> None:
        for a, f in self.flipped.items():
            self.flipped[a] = np.asarray(f, bool) & np.asarray(self.correct, bool)


def union(flags: ModelFlags, attacks) -> np.ndarray:
    out = np.zeros(len(flags.questions), bool)
    for a in attacks:
        if a in flags.flipped:
            out |= flags.flipped[a]
    return out


def rate(numer: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    w = np.ones(len(correct)) if weights is None else weights
    denom = float((w * correct).sum())
    return float((w * numer).sum()) / denom if denom else float("nan")


def model_summary(flags: ModelFlags, baselines, enhanced: dict[str, tuple[str, ...]]) -> dict:
    c = flags.correct.astype(bool)
    out = {
        "model": flags.model,
        "level": flags.level,
        "n": len(c),
        "clean_acc": float(c.mean()) if len(c) else float("nan"),
        "n_correct": int(c.sum()),
        "asr": {a: float("nan") if a in flags.not_run else rate(f, c) for a, f in flags.flipped.items()},
        "r0": rate(union(flags, baselines), c),
        "r_plus": rate(union(flags, flags.flipped), c),
        "delta": {e: float("nan") if e in flags.not_run else rate(flags.flipped[e] & ~union(flags, base), c)
                  for e, base in enhanced.items() if e in flags.flipped},
    }
    out["gap"] = out["r_plus"] - out["r0"]
    if flags.not_run:
        out["not_run"] = dict(flags.not_run)
    return out


def _metric_matrix(models: list[ModelFlags], metric) -> tuple[np.ndarray, np.ndarray]:
    """(numerator indicators, clean-correct indicators), each (M, Q)."""
    num = np.stack([metric(m) for m in models]).astype(float)
    cor = np.stack([m.correct for m in models]).astype(float)
    return num, cor


def bootstrap_level_ci(
    models: list[ModelFlags], metric, n_boot: int = 10_000, seed: int = 0, alpha: float = 0.05, minus=None
) -> tuple[float, float, float]:
    """Point estimate and percentile CI of the unweighted mean of ``metric`` over ``models``.

    ``metric(model) -> (Q,) bool`` numerator indicator; questions are resampled
    jointly for all models (they must share the question list). With ``minus``,
    the statistic is the paired difference mean(metric) - mean(minus), taken on
    every replicate from the same draw (R+ - R0: the two are paired, so their
    separate intervals cannot give this one).
    """
    q = models[0].questions
    if any(m.questions != q for m in models):
        raise ValueError("bootstrap needs every model of a level scored on the same questions")
    metrics = [metric] if minus is None else [metric, minus]
    with warnings.catch_warnings():  # an empty C gives nan (reported as n/a), not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        points, reps = _replicates(models, metrics, n_boot, seed)
        point, rep = (points[0], reps[0]) if minus is None else (points[0] - points[1], reps[0] - reps[1])
        lo, hi = np.nanpercentile(rep, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return point, float(lo), float(hi)


def _replicates(models: list[ModelFlags], metrics: list, n_boot: int, seed: int) -> tuple[list[float], np.ndarray]:
    """Level means of each metric, and their (n_metrics, n_boot) replicates from one shared draw of questions."""
    n_q = len(models[0].questions)
    mats = [_metric_matrix(models, m) for m in metrics]
    points = [float(np.nanmean([rate(n.astype(bool), c.astype(bool)) for n, c in zip(num, cor)]))
              for num, cor in mats]
    rng = np.random.default_rng(seed)
    reps = np.empty((len(metrics), n_boot))
    chunk = 1000
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        idx = rng.integers(0, n_q, size=(b, n_q))
        w = np.stack([np.bincount(row, minlength=n_q) for row in idx]).astype(float)  # (b, Q) multiplicities
        for k, (num, cor) in enumerate(mats):
            with np.errstate(invalid="ignore", divide="ignore"):
                per_model = (w @ num.T) / (w @ cor.T)  # (b, M)
            reps[k, start : start + b] = np.nanmean(per_model, axis=1)  # a replicate with empty C is nan, dropped
    return points, reps


def rank_agreement(proxy: dict[str, float], target: dict[str, float], moved_by: int = 3) -> dict:
    """Spearman rho, Kendall tau-b and how many models move >= ``moved_by`` places (higher = riskier)."""
    names = sorted(proxy)
    a = np.array([proxy[n] for n in names])
    b = np.array([target[n] for n in names])
    rank_a = sps.rankdata(-a, method="min")
    rank_b = sps.rankdata(-b, method="min")
    with warnings.catch_warnings():  # constant ranks have no correlation: nan, reported as "undefined"
        warnings.simplefilter("ignore")
        rho = sps.spearmanr(a, b).statistic if len(names) > 1 else float("nan")
        tau = sps.kendalltau(a, b, variant="b").statistic if len(names) > 1 else float("nan")
    moved = [n for n, ra, rb in zip(names, rank_a, rank_b) if abs(ra - rb) >= moved_by]
    return {"spearman_rho": float(rho), "kendall_tau_b": float(tau), "n_moved": len(moved), "moved": moved,
            "n_models": len(names), "moved_by": moved_by}


def bootstrap_groups(
    groups: list[np.ndarray], stat, n_boot: int = 10_000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """Mean over groups (models) of ``stat(rows)``, with a percentile CI.

    Each group is a (n_i, k) array of per-sample values of one model; a
    replicate resamples every model's rows with replacement, independently
    (the diagnostics run on different samples per model, so the models are
    fixed and their samples are not paired). Empty groups are skipped.
    """
    groups = [np.asarray(g, float).reshape(len(g), -1) for g in groups if len(g)]
    if not groups:
        return float("nan"), float("nan"), float("nan")
    point = float(np.mean([stat(g) for g in groups]))
    rng = np.random.default_rng(seed)
    reps = np.zeros(n_boot)
    for g in groups:
        idx = rng.integers(0, len(g), size=(n_boot, len(g)))
        reps += np.array([stat(g[i]) for i in idx])
    reps /= len(groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanpercentile(reps, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return point, float(lo), float(hi)
