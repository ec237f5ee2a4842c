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


def test_gap_on_two_questions_by_hand():
    """C = {A, B}; A flipped by End-PGD, B only by MANTIS: R0 = 1/2, R+ = 1, gap = 1/2. A replicate draws two
    questions: AA (p 1/4) gives gap 0, AB or BA (1/2) gives 1/2, BB (1/4) gives 1; R+ is 1 on every draw."""
    m = ModelFlags("m", "L1", ["A", "B"], np.array([1, 1], bool),
                   {"end_pgd": np.array([1, 0], bool), "mantis": np.array([0, 1], bool)})
    r0, rp = (lambda f: union(f, ["end_pgd"])), (lambda f: union(f, ["end_pgd", "mantis"]))
    assert model_summary(m, ["end_pgd"], {"mantis": ("end_pgd",)})["gap"] == 0.5
    assert bootstrap_level_ci([m], rp, n_boot=4000, seed=1) == (1.0, 1.0, 1.0)
    assert bootstrap_level_ci([m], rp, n_boot=4000, seed=1, minus=r0) == (0.5, 0.0, 1.0)
    # the replicate distribution itself: differences of the same draws, in {0, 1/2, 1} with weights 1/4, 1/2, 1/4
    from mmaudit.stats import _replicates

    _, reps = _replicates([m], [rp, r0], 4000, 1)
    diff = reps[0] - reps[1]
    assert set(np.unique(diff)) <= {0.0, 0.5, 1.0}
    assert np.mean(diff == 0.5) == pytest.approx(0.5, abs=0.03)
    assert np.mean(diff == 1.0) == pytest.approx(0.25, abs=0.03)


def test_paired_gap_ci_is_narrower_than_either_interval():
    """R0 and R+ share most flips, so they move together across draws; their difference varies far less."""
    rng = np.random.default_rng(0)
    q = [f"q{i:03d}" for i in range(200)]
    models = []
    for k in range(3):
        base = rng.random(200) < 0.5
        extra = ~base & (rng.random(200) < 0.1)
        models.append(ModelFlags(f"m{k}", "L2", q, np.ones(200, bool), {"end_pgd": base, "mantis": extra}))
    r0, rp = (lambda f: union(f, ["end_pgd"])), (lambda f: union(f, ["end_pgd", "mantis"]))
    p0, lo0, hi0 = bootstrap_level_ci(models, r0, n_boot=3000, seed=2)
    pp, lop, hip = bootstrap_level_ci(models, rp, n_boot=3000, seed=2)
    g, lo, hi = bootstrap_level_ci(models, rp, n_boot=3000, seed=2, minus=r0)
    assert g == pp - p0 and lo <= g <= hi
    expected = np.mean([(m.flipped["mantis"] & ~m.flipped["end_pgd"]).mean() for m in models])
    assert g == pytest.approx(expected)
    assert hi - lo < min(hi0 - lo0, hip - lop)
    assert hi - lo < (hip - lo0) - (lop - hi0)  # far narrower than what the two intervals would allow


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


def test_two_invocations_within_one_second_are_two_run_records(tmp_path, monkeypatch):
    """An audit and its transfer in one process within a second: both parameter sets are kept, oldest first (with
    ids to the second, the second invocation's record shared the first's key and was dropped)."""
    import time

    from mmaudit.manifest import Invocation, invocations

    store = RunStore(tmp_path / "results.jsonl")
    clock = iter([1_700_000_000.25, 1_700_000_000.75])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    Invocation(store, "audit", {"a": 1})
    Invocation(store, "audit transfer", {"b": 2})
    runs = invocations(store)
    assert [r["command"] for r in runs] == ["audit", "audit transfer"]
    assert [r["started"] for r in runs] == ["2023-11-14T22:13:20.250000Z", "2023-11-14T22:13:20.750000Z"]
