"""The clustered paired bootstrap of the QIMG-7 tables (the routers are tested in test_satr_release.py)."""

import numpy as np
import pytest

from mmaudit.rag.construct.records import REGIMES
from mmaudit.rag.evaluate.score import clustered_bootstrap


def _rows(method_scores: dict[str, dict[str, float]], dataset="D") -> dict:
    """method -> {qid: (tc, tp)} as 16 regime rows per question."""
    per = {}
    for method, qs in method_scores.items():
        rows = []
        for q, (tc, tp) in qs.items():
            rows += [{"qid": q, "regime": r, "_score": tc if r.startswith("TC") else tp} for r in REGIMES]
        per[method] = {dataset: rows}
    return per


def test_bootstrap_is_seeded_keeps_questions_whole_and_pairs_methods():
    per = _rows({"A": {"q1": (1.0, 0.0), "q2": (0.0, 1.0)}, "B": {"q1": (0.5, 0.5), "q2": (0.5, 0.5)}})
    a = clustered_bootstrap(per, n_boot=300, seed=4, pairs=[("A", "A"), ("A", "B")])
    assert a == clustered_bootstrap(per, n_boot=300, seed=4, pairs=[("A", "A"), ("A", "B")])
    assert a["methods"]["A"]["tc"][0] == pytest.approx(0.5)
    assert a["deltas"]["A - A"] == {k: (0.0, 0.0, 0.0) for k in ("tc", "tp", "drop", "balanced")}
    # q1 and q2 move with all their regimes: A's balanced score is 0.5 in every replicate, whatever is drawn
    assert a["methods"]["A"]["balanced"] == pytest.approx((0.5, 0.5, 0.5))
    # and with 2 questions TC can only take the values 0, 0.5, 1 (never a mix of one question's regimes)
    rng_vals = set()
    for seed in range(20):
        lo = clustered_bootstrap(per, n_boot=1, seed=seed)["methods"]["A"]["tc"][1]
        rng_vals.add(round(lo, 6))
    assert rng_vals <= {0.0, 0.5, 1.0}
    one = _rows({"A": {"q1": (0.7, 0.2)}})
    assert clustered_bootstrap(one, n_boot=50)["methods"]["A"]["tp"] == pytest.approx((0.2, 0.2, 0.2))


def test_bootstrap_resamples_within_each_dataset():
    per = _rows({"A": {"q1": (1.0, 1.0), "q2": (0.0, 0.0)}}, "D1")
    per["A"]["D2"] = _rows({"A": {"x": (1.0, 1.0)}}, "D2")["A"]["D2"]
    b = clustered_bootstrap(per, n_boot=2000, seed=0)["methods"]["A"]["tc"]
    assert b[0] == pytest.approx((0.5 + 1.0) / 2) and b[1] >= 0.5 and b[2] <= 1.0 and np.isfinite(b).all()
