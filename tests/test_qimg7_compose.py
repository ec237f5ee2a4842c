"""Benchmark composition as the paper's (Section 3, D.3, D.4, E.6): per-dataset caps in dataset order, families
seeded per dataset or fixed by a file, two concrete facts per rule-polluted passage, E.6's ANNOTATION used."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from mmaudit.models.chat import ScriptedChat
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark, qid_order, read_families
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.construct.records import read_rows
from mmaudit.rag.construct.text_pollution import SUBSTITUTES, PollutionFailed, RulePolluter, assign_families

QS = mini_inputs()
FAST = {"patch_steps": 2, "style_steps": 2}


def relabel(q, dataset, qid):
    return dataclasses.replace(q, dataset=dataset, qid=qid)


def built(summary):
    rows = [r for f in summary["files"] for r in read_rows(Path(f))]
    return {(r.dataset, str(r.qid)) for r in rows}


def test_caps_per_dataset_in_dataset_order_with_numeric_qids(tmp_path):
    assert sorted(["10", "2", "1", "x"], key=qid_order) == ["1", "2", "10", "x"]
    inputs = [relabel(QS[0], "alpha", "10"), relabel(QS[1], "alpha", "2"), relabel(QS[2], "alpha", "1"),
              relabel(QS[3], "beta", "3"), relabel(QS[4], "beta", "20")]
    s = build_benchmark(inputs, tmp_path, BuildConfig(limit={"alpha": 2, "beta": 1}, **FAST))
    assert built(s) == {("alpha", "1"), ("alpha", "2"), ("beta", "3")}  # "10" sorts after "2", not before
    assert s["counts"]["not_selected_cap"] == 2 and s["counts"]["final"] == 3


def test_families_are_drawn_per_dataset_with_seed_42_or_read_from_a_file(tmp_path):
    inputs = [relabel(QS[0], "alpha", "1"), relabel(QS[1], "alpha", "2"), relabel(QS[2], "beta", "1")]
    s = build_benchmark(inputs, tmp_path / "seeded", BuildConfig(**FAST))
    n_alpha = sum(min(len(q.passages), 5) for q in inputs[:2])
    n_beta = min(len(inputs[2].passages), 5)
    counts = {ds: sum(v.values()) for ds, v in s["families"].items()}
    assert counts == {"alpha": n_alpha, "beta": n_beta}
    from collections import Counter

    assert Counter(assign_families(n_alpha, 42)) == Counter(s["families"]["alpha"])
    assert Counter(assign_families(n_beta, 42)) == Counter(s["families"]["beta"])  # its own generator, seed 42
    fixed = tmp_path / "fams.csv"
    fixed.write_text("dataset,qid,passage,family\n" + "".join(f"beta,1,{i},Conflicting\n" for i in range(5)))
    s2 = build_benchmark(inputs, tmp_path / "fixed", BuildConfig(families=read_families(fixed), **FAST))
    assert {k: v for k, v in s2["families"]["beta"].items() if v} == {"Conflicting": n_beta}
    assert s2["families"]["alpha"] == s["families"]["alpha"]  # questions not in the file keep the seeded draw
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"dataset": "beta", "qid": 1, "passage": 0, "family": "Satire"}) + "\n")
    with pytest.raises(Exception, match="Satire"):
        read_families(bad)


FACT = re.compile(r"\b\d+(?:[.,]\d+)?\b|\b[A-Z][a-z]{2,}\b")


def concrete_facts(text: str) -> list[str]:
    """Numbers, capitalised names and the substitutable key terms written in a passage."""
    terms = [w for w in SUBSTITUTES if re.search(rf"\b{re.escape(w)}\b", text, re.IGNORECASE)]
    return FACT.findall(text) + terms


def test_every_rule_polluted_passage_alters_at_least_two_concrete_facts():
    checked = 0
    for q in QS:
        for p in q.passages[:5]:
            for fam in ("Unambiguous", "Conflicting", "Misleading", "Fabricated"):
                out = RulePolluter()(q.question, p.title, p.snippet, fam).polluted
                src = concrete_facts(p.snippet)
                kept = concrete_facts(out)
                gone = [f for f in src if f not in kept]  # a fact of the source that the pollution no longer states
                assert len(gone) >= 2, (p.snippet, out, gone)
                checked += 1
    assert checked == 160
    with pytest.raises(PollutionFailed, match="only 0 concrete fact"):
        RulePolluter()("q?", "", "it is so, as they say in general.", "Unambiguous")


def test_the_annotation_line_of_e6_is_rendered_by_the_typography(tmp_path):
    reply = "1. Tower in Lyon, 1925\n2. Lyon tower at dusk\n3. Lyon's iron tower\nANNOTATION: Lyon tower built in 1925"
    inputs = [dataclasses.replace(q, false_claim="") for q in QS[:2]]  # two: entity swap needs a donor
    s = build_benchmark(inputs, tmp_path, BuildConfig(caption_model=ScriptedChat([reply]), **FAST))
    rows = [r for f in s["files"] for r in read_rows(Path(f)) if r.image_pollution_type == "figstep_typography"]
    assert rows and all(r.image_evidence.metadata.manipulation_prompt == "Lyon tower built in 1925" for r in rows)
