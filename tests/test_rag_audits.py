"""Atomic factuality audit, evaluator sensitivity and Cohen's kappa on hand-built inputs."""

import json

import pytest

from mmaudit.models.chat import ScriptedChat
from mmaudit.rag.construct.records import REGIMES
from mmaudit.rag.evaluate.audits import atomic_audit, cohen_kappa, evaluator_sensitivity, parse_claims


def per_rows():
    rows = {"good": [], "bad": []}
    for q in ("1", "2"):
        for g in REGIMES:
            rows["good"].append({"qid": q, "regime": g, "question": f"q{q}?", "answer": "alpha. beta.", "_score": 1})
            rows["bad"].append({"qid": q, "regime": g, "question": f"q{q}?",
                                "answer": "gamma." if g.startswith("TP") else "alpha. beta.", "_score": 0})
    return {m: {"D": r} for m, r in rows.items()}


def decompose_and_judge(messages):
    p = messages[-1]["content"]
    if p.startswith("Split the answer"):
        answer = p.split("Answer: ", 1)[1]
        return "\n".join(f"{i}. {c.strip()}" for i, c in enumerate(answer.split("."), 1) if c.strip())
    claim = p.split("MODEL ANSWER:\n", 1)[1].split("\n", 1)[0]
    return json.dumps({"label": {"alpha": "supported", "beta": "uncertain"}.get(claim, "unsupported")})


def test_atomic_audit_scores_claims_with_uncertain_as_zero():
    res = atomic_audit(per_rows(), {}, ScriptedChat(decompose_and_judge), per_dataset=2)
    assert res["questions"] == 2 and res["answers_without_claims"] == 0
    assert res["methods"]["good"]["tc"] == pytest.approx(0.5)  # alpha 1.0, beta uncertain -> 0
    assert res["methods"]["bad"]["tp"] == pytest.approx(0.0) and res["methods"]["bad"]["drop"] == pytest.approx(0.5)
    assert parse_claims("1. a\n2) b\nnot a claim") == ["a", "b"]


def test_evaluator_sensitivity_scores_each_method_under_each_judge():
    strict = ScriptedChat(lambda m: json.dumps({"label": "unsupported"}))
    kind = ScriptedChat(lambda m: json.dumps({"label": "supported" if "gamma" not in m[-1]["content"]
                                              else "unsupported"}))
    res = evaluator_sensitivity(per_rows(), {}, {"strict": strict, "kind": kind}, per_dataset=2)
    assert res["strict"] == {"good": 0.0, "bad": 0.0}
    assert res["kind"] == {"good": 1.0, "bad": 0.5}


def test_cohen_kappa_by_hand():
    a = ["supported", "supported", "unsupported", "unsupported"]
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    b = ["supported", "unsupported", "unsupported", "supported"]
    assert cohen_kappa(a, b) == pytest.approx(0.0)  # agreement 0.5, chance 0.5
    c = ["supported", "partially_supported", "unsupported", "unsupported"]
    # observed agreement 3/4, chance (2/4*1/4 + 2/4*2/4) = 3/8 -> (0.75 - 0.375) / 0.625 = 0.6
    assert cohen_kappa(a, c) == pytest.approx(0.6)
    assert cohen_kappa(a, c, weights="quadratic") > cohen_kappa(a, c)  # a near miss costs less when weighted


def colliding():
    """qid 7 in two datasets (as in the release): the same answer must meet each dataset's own evidence."""
    rows = {"m": {}}
    for ds, q in (("fava", "Who painted the Mona Lisa?"), ("longfact", "What is photosynthesis?")):
        rows["m"][ds] = [{"qid": 7, "regime": g, "question": q, "answer": "Leonardo.", "_score": 1} for g in REGIMES]
    clean = {("fava", "7"): [{"title": "t", "snippet": "Leonardo painted it.", "url": ""}],
             ("longfact", "7"): [{"title": "t", "snippet": "Plants convert light.", "url": ""}]}
    return rows, clean


def test_atomic_audit_keys_questions_by_dataset_and_qid():
    rows, clean = colliding()

    def judge(messages):
        p = messages[-1]["content"]
        if p.startswith("Split the answer"):
            return "1. Leonardo"
        ok = "Leonardo painted" in p and "Mona Lisa" in p  # FAVA's question with FAVA's evidence
        mixed = ("Mona Lisa" in p) != ("Leonardo painted" in p)
        assert not mixed, "a question met another dataset's evidence"
        return json.dumps({"label": "supported" if ok else "unsupported"})

    res = atomic_audit(rows, clean, ScriptedChat(judge), per_dataset=1)
    assert res["questions"] == 2 and res["answers"] == 2  # one per (dataset, qid), not one per qid
    assert res["claims"] == 2
    assert res["methods"]["m"]["tc"] == pytest.approx(0.5)  # supported in FAVA, not in LongFact


def test_kappa_keys_rows_by_dataset_and_qid(tmp_path):
    from typer.testing import CliRunner

    from mmaudit.cli import app

    rows, _ = colliding()
    labels = {"fava": "supported", "longfact": "unsupported"}
    for ds, rs in rows["m"].items():
        path = tmp_path / "evaluation" / "judged" / "s" / ds / "m_1.judged.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r | {"baseline": "m", "label": labels[ds], "score": None}) + "\n"
                                for r in rs))
    human = tmp_path / "human.jsonl"
    human.write_text("".join(json.dumps({"dataset": ds, "qid": 7, "regime": "TC_IC", "baseline": "m",
                                         "label": lab}) + "\n" for ds, lab in labels.items()))
    res = CliRunner().invoke(app, ["bench", "kappa", "--human", str(human), "--run", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "2 outputs: exact agreement 100.0%" in res.output  # each matched its own dataset's judged row
    human.write_text(json.dumps({"qid": 7, "regime": "TC_IC", "baseline": "m", "label": "supported"}) + "\n")
    res = CliRunner().invoke(app, ["bench", "kappa", "--human", str(human), "--run", str(tmp_path)])
    assert res.exit_code != 0 and "dataset" in res.output
