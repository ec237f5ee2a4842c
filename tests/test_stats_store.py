import json

import numpy as np
import pytest

from mmaudit.stats import ModelFlags, bootstrap_level_ci, model_summary, rank_agreement, union
from mmaudit.store import RunStore, key_of


def flags():
    q = [f"q{i}" for i in range(10)]
    correct = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], bool)  # C = q0..q7
    vis = np.array([1, 0, 0, 0, 0, 0, 0, 0, 1, 0], bool)  # q8 is outside C: never a flip
    end = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    man = np.array([0, 1, 1, 1, 0, 0, 0, 0, 0, 1], bool)
    return ModelFlags("m", "L2", q, correct, {"vis_pgd": vis, "end_pgd": end, "mantis": man})


def test_union_r0_rplus_delta_by_hand():
    f = flags()
    s = model_summary(f, ["vis_pgd", "end_pgd"], {"mantis": ("vis_pgd", "end_pgd")})
    assert s["n_correct"] == 8
    assert s["asr"] == {"vis_pgd": 1 / 8, "end_pgd": 2 / 8, "mantis": 3 / 8}
    assert s["r0"] == 2 / 8  # {q0, q1}
    assert s["r_plus"] == 4 / 8  # {q0, q1, q2, q3}
    assert s["delta"]["mantis"] == 2 / 8  # {q2, q3}: flipped by MANTIS and by no baseline
    assert union(f, ["mantis"]).sum() == 3


def test_bootstrap_deterministic_and_contains_point():
    f = flags()
    g = ModelFlags("m2", "L2", f.questions, f.correct, {"end_pgd": f.flipped["mantis"]})
    metric = lambda m: union(m, ["end_pgd", "mantis"])  # noqa: E731
    a = bootstrap_level_ci([f, g], metric, n_boot=2000, seed=3)
    b = bootstrap_level_ci([f, g], metric, n_boot=2000, seed=3)
    c = bootstrap_level_ci([f, g], metric, n_boot=2000, seed=4)
    assert a == b and a != c
    point, lo, hi = a
    assert point == pytest.approx((4 / 8 + 3 / 8) / 2)
    assert lo <= point <= hi


def test_rank_agreement():
    proxy = {"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.3, "e": 0.1}
    target = {"a": 0.1, "b": 0.7, "c": 0.5, "d": 0.3, "e": 0.9}  # a: 1st -> 5th, e: 5th -> 1st
    r = rank_agreement(proxy, target)
    assert r["n_models"] == 5 and r["moved"] == ["a", "e"] and r["n_moved"] == 2
    assert r["spearman_rho"] == pytest.approx(1 - 6 * 32 / (5 * 24))  # rank shifts 4 and 4
    assert rank_agreement(proxy, proxy)["kendall_tau_b"] == pytest.approx(1.0)


def test_store_survives_torn_line_and_never_duplicates(tmp_path):
    path = tmp_path / "r.jsonl"
    st = RunStore(path)
    k = key_of(a=1)
    st.put_many([{"key": k, "v": 1}, {"key": key_of(a=2), "v": 2}])
    st.put({"key": k, "v": 99})  # same key: ignored
    with path.open("a") as f:
        f.write('{"key": "torn", "v"')  # a kill mid-write
    st2 = RunStore(path)
    assert len(st2) == 2 and st2.torn_lines == 1 and st2.get(k)["v"] == 1
    st2.put({"key": key_of(a=3), "v": 3})
    good = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    assert [r["v"] for r in good] == [1, 2, 3]  # the torn line did not swallow the new record
    assert len(RunStore(path)) == 3
