"""SATR routers decision by decision (malformed outputs included), judge verdicts, the clustered paired bootstrap."""

import json

import numpy as np
import pytest

from mmaudit.rag.build.records import REGIMES
from mmaudit.rag.evaluate.judge_labels import parse_verdict
from mmaudit.rag.evaluate.routers import (
    Candidates,
    answer_consensus,
    cascaded_router,
    field_selector,
    self_check_gate,
    similarity,
    soft_conductor,
    text_trust,
    token_f1,
    triage_gate,
)
from mmaudit.rag.evaluate.score import clustered_bootstrap

C = Candidates(parametric="P answer", text_only="T answer", full_mm="M answer")


def j(**kw) -> str:
    return json.dumps(kw)


@pytest.mark.parametrize("text_rel,decision,expected", [
    ("conflicting", "FULL_MM", "P answer"), ("suspicious", "TEXT_ONLY", "P answer"), ("weak", "FULL_MM", "P answer"),
    ("trustworthy", "TEXT_ONLY", "T answer"), ("trustworthy", "FULL_MM", "M answer"),
    ("trustworthy", "full-mm", "M answer"), ("trustworthy", "FALLBACK", "P answer"),
    ("trustworthy", "COMPOSE", "P answer"), ("trustworthy", None, "P answer"), ("trustworthy", "BOTH", "P answer"),
    ("", "TEXT_ONLY", "T answer"),
])
def test_field_selector_rules(text_rel, decision, expected):
    raw = j(text_reliability=text_rel, decision=decision, final_answer="composed", image_reliability="suspicious")
    assert field_selector(C, raw).answer == expected


def test_field_selector_malformed_output_falls_back_and_says_so():
    for raw in ("not json", "", "{broken", "[1, 2]"):
        r = field_selector(C, raw)
        assert (r.answer, r.route, r.parsed, r.raw) == ("P answer", "FALLBACK", False, raw)


def test_soft_conductor_may_keep_a_composed_answer():
    trust = j(decision="TRUST")
    assert soft_conductor(C, j(text_reliability="trustworthy", decision="COMPOSE", final_answer=" X "), trust).answer \
        == "X"
    assert soft_conductor(C, j(text_reliability="trustworthy", decision="COMPOSE", final_answer=""), trust).answer \
        == "P answer"
    assert soft_conductor(C, j(text_reliability="trustworthy", decision="FULL_MM"), j(decision="FALLBACK")).route \
        == "FALLBACK"
    assert soft_conductor(C, j(text_reliability="conflicting", decision="TEXT_ONLY"), trust).answer == "P answer"
    assert soft_conductor(C, "garbage", trust).parsed is False


def test_gates_and_the_cascade():
    assert self_check_gate(C, j(decision="TRUST")).answer == "M answer"
    assert self_check_gate(C, j(decision="FALLBACK")).answer == "P answer"
    assert self_check_gate(C, "??").answer == "P answer" and not self_check_gate(C, "??").parsed
    assert triage_gate(C, j(decision="TEXT_ONLY")).answer == "T answer"
    assert triage_gate(C, j(decision="IMAGE_ONLY")).route == "FALLBACK"
    # E.5: self-check first, then triage
    assert cascaded_router(C, j(decision="FALLBACK"), j(decision="FULL_MM")).answer == "P answer"
    assert cascaded_router(C, j(decision="TRUST"), j(decision="TEXT_ONLY")).answer == "T answer"
    assert cascaded_router(C, j(decision="TRUST"), j(decision="FULL_MM")).answer == "M answer"
    assert cascaded_router(C, j(decision="TRUST"), "nonsense").route == "FALLBACK"
    assert cascaded_router(C, "```json\n{\"decision\": \"TRUST\"}\n```", j(decision="FULL_MM")).answer == "M answer"


def test_text_trust_states():
    assert text_trust(C, j(text_reliability="trustworthy")).answer == "T answer"
    for state in ("conflicting", "weak", "suspicious"):
        assert text_trust(C, j(text_reliability=state)).answer == "P answer"
    assert text_trust(C, "?").parsed is False


def test_answer_consensus_by_hand():
    assert token_f1("a b c", "a b d") == pytest.approx(2 * 2 / 6)
    assert similarity("abc", "abc") == pytest.approx(1.0)
    c = Candidates("Paris is the capital", "Paris is the capital of France", "Lyon")
    r = answer_consensus(c)
    assert r.answer == c.parametric or r.answer == c.text_only
    scores = json.loads(r.raw)["scores"]
    assert scores[2] < min(scores[:2]) and r.route.startswith("CONSENSUS:")
    same = answer_consensus(Candidates("x", "x", "x"))
    assert same.route == "CONSENSUS:PARAMETRIC"  # ties go to the earlier branch


def test_verdicts_and_unparseable_ones():
    assert parse_verdict(j(label="supported")) == ("supported", 1.0, True)
    assert parse_verdict("Verdict: partially_supported.") == ("partially_supported", 0.5, True)
    assert parse_verdict(j(label="unsupported")) == ("unsupported", 0.0, True)
    assert parse_verdict("I cannot tell") == ("uncertain", 0.25, False)


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
