"""SATR and its baselines decision by decision, as the authors' released post-processing decides; the judge's
verdicts; `bench replay` against the released choices files."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.rag.evaluate.judge_labels import parse_verdict
from mmaudit.rag.evaluate.replay import OUTPUT_FIELDS, replay
from mmaudit.rag.evaluate.routers import (
    Candidates,
    answer_consensus,
    cascaded_router,
    field_selector,
    gated,
    normalize_decision,
    resolve,
    self_check,
    self_check_gate,
    soft_conductor,
    text_trust,
    token_f1,
    triage,
    triage_gate,
    use_resolver,
)

C = Candidates(parametric="P answer", text_only="T answer", full_mm="M answer")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "qimg7-format" / "evaluation"
TRUST, FALL = json.dumps({"decision": "TRUST", "reason": "consistent"}), json.dumps({"decision": "FALLBACK"})


def j(**kw) -> str:
    return json.dumps(kw)


def decided(r) -> tuple[str, str, str]:
    return r.route, r.source, r.answer


# ------------------------------------------------------------------ Field-Selector: select-only resolver, policy field

@pytest.mark.parametrize("text_rel,decision,expected", [
    ("conflicting", "FULL_MM", ("FALLBACK", "parametric", "P answer")),
    (" Suspicious ", "TEXT_ONLY", ("FALLBACK", "parametric", "P answer")),
    ("weak", "FULL_MM", ("FALLBACK", "parametric", "P answer")),
    ("low", "TEXT_ONLY", ("FALLBACK", "parametric", "P answer")),  # the release's wider bad-text vocabulary
    ("unreliable", "TEXT_ONLY", ("FALLBACK", "parametric", "P answer")),
    ("trustworthy", "TEXT_ONLY", ("TEXT_ONLY", "text_only", "T answer")),
    ("trustworthy", "FULL_MM", ("FULL_MM", "full_mm", "M answer")),
    ("high", "full-mm", ("FULL_MM", "full_mm", "M answer")),  # 'FULL' anywhere reads as FULL_MM
    ("trustworthy", "text", ("TEXT_ONLY", "text_only", "T answer")),
    ("trustworthy", "PARAMETRIC", ("FALLBACK", "parametric", "P answer")),
    ("trustworthy", "FALLBACK", ("FALLBACK", "parametric", "P answer")),
    ("trustworthy", "COMPOSE", ("FALLBACK", "parametric", "P answer")),  # select-only: COMPOSE is a fallback
    ("trustworthy", None, ("FALLBACK", "parametric", "P answer")),
    ("trustworthy", "BOTH", ("FALLBACK", "parametric", "P answer")),
    ("", "TEXT_ONLY", ("TEXT_ONLY", "text_only", "T answer")),  # an empty reliability is not a bad one
    ("medium", "FULL_MM", ("FULL_MM", "full_mm", "M answer")),
])
def test_field_selector_rules(text_rel, decision, expected):
    raw = j(text_reliability=text_rel, decision=decision, final_answer="composed", image_reliability="suspicious")
    assert decided(field_selector(C, raw)) == expected
    assert decided(field_selector(C, raw, FALL)) == expected  # the field policy never reads the self-check


def test_field_selector_malformed_output_falls_back_and_is_counted():
    for raw in ("not json", "", "{broken", "[1, 2]", j(decision=3)):
        r = field_selector(C, raw)
        assert decided(r) == ("FALLBACK", "parametric", "P answer") and r.parsed is False
    fenced = "```json\n" + j(text_reliability="trustworthy", decision="TEXT_ONLY") + "\n```"
    assert decided(field_selector(C, fenced)) == ("TEXT_ONLY", "text_only", "T answer")
    chatter = "Sure! " + j(text_reliability="trustworthy", decision="FULL_MM") + " Hope this helps."
    assert field_selector(C, chatter).parsed is True


# ------------------------------------------------------------------ Soft-Conductor: composing resolver, policy soft

def test_soft_conductor_the_two_released_cases():
    # self-check FALLBACK + resolver TEXT_ONLY + trustworthy text -> TEXT_ONLY (the text reads good)
    r = soft_conductor(C, j(text_reliability="trustworthy", decision="TEXT_ONLY"), FALL)
    assert decided(r) == ("TEXT_ONLY", "text_only", "T answer")
    # self-check TRUST + resolver COMPOSE + conflicting text -> the composed answer (the self-check trusted)
    r = soft_conductor(C, j(text_reliability="conflicting", decision="COMPOSE", final_answer=" X. "), TRUST)
    assert decided(r) == ("COMPOSE", "composed", "X.")


@pytest.mark.parametrize("check,text_rel,decision,final,expected", [
    (FALL, "conflicting", "FULL_MM", "", ("FALLBACK", "parametric", "P answer")),
    (FALL, "trustworthy", "FALLBACK", "", ("FALLBACK", "parametric", "P answer")),
    (FALL, "trustworthy", "COMPOSE", "Y", ("COMPOSE", "composed", "Y")),
    (FALL, "weak", "TEXT_ONLY", "", ("FALLBACK", "parametric", "P answer")),
    (FALL, "", "TEXT_ONLY", "", ("FALLBACK", "parametric", "P answer")),  # fell back and the text is not good
    (TRUST, "conflicting", "FULL_MM", "", ("FULL_MM", "full_mm", "M answer")),
    (TRUST, "trustworthy", "FALLBACK", "", ("FALLBACK", "parametric", "P answer")),
    (TRUST, "trustworthy", "COMPOSE", "  ", ("FALLBACK", "parametric", "P answer")),  # an empty composition
    (j(decision="TRUST", reason="no need to FALLBACK"), "trustworthy", "FULL_MM", "",
     ("FULL_MM", "full_mm", "M answer")),  # the word anywhere is a fallback: then the good text lets it through
    (j(decision="TRUST", reason="no need to fallback"), "conflicting", "FULL_MM", "",
     ("FALLBACK", "parametric", "P answer")),
    ("??", "conflicting", "FULL_MM", "", ("FULL_MM", "full_mm", "M answer")),  # an unreadable self-check trusts
])
def test_soft_conductor_rules(check, text_rel, decision, final, expected):
    raw = j(text_reliability=text_rel, decision=decision, final_answer=final)
    assert decided(soft_conductor(C, raw, check)) == expected


def test_policies_on_their_inputs():
    # gated(policy, selfcheck, resolver decision, resolver source, text reliability)
    assert gated("soft", "TRUST", "", "", "trustworthy") == ("RESOLVER", "resolver")  # no resolver row
    assert gated("field", "TRUST", "", "", "trustworthy") == ("FALLBACK", "parametric")
    assert gated("strict", "TRUST", "FULL_MM", "full_mm", "conflicting") == ("FULL_MM", "full_mm")
    assert gated("strict", "FALLBACK", "FULL_MM", "full_mm", "trustworthy") == ("FALLBACK", "parametric")
    assert gated("conservative", "TRUST", "FULL_MM", "full_mm", "trustworthy") == ("FULL_MM", "full_mm")
    assert gated("conservative", "TRUST", "FULL_MM", "full_mm", "weak") == ("FALLBACK", "parametric")
    assert gated("conservative", "FALLBACK", "TEXT_ONLY", "text_only", "trustworthy") == ("FALLBACK", "parametric")
    assert use_resolver("soft", "fallback", "text_only", "RELIABLE")  # case is ignored throughout
    with pytest.raises(ValueError, match="unknown policy"):
        gated("lenient", "TRUST", "FULL_MM", "full_mm", "trustworthy")


def test_resolver_readings():
    assert [normalize_decision(x) for x in ("full_mm", "Text only", "parametric", "SYNTHESIZE", "", None, 7)] == \
        ["FULL_MM", "TEXT_ONLY", "FALLBACK", "COMPOSE", "FALLBACK", "FALLBACK", "FALLBACK"]
    r = resolve(C, j(decision="COMPOSE", final_answer="new", text_reliability="Weak"), compose=True)
    assert (r.decision, r.chosen_source, r.answer, r.text_reliability) == ("COMPOSE", "composed", "new", "Weak")
    assert resolve(C, j(decision="COMPOSE", final_answer="new"), compose=False).decision == "FALLBACK"
    assert resolve(C, "ERROR: timeout", compose=True).parsed is False


# ------------------------------------------------------------------ gates, the cascade, TextTrust, consensus

def test_gates_and_the_cascade():
    assert decided(self_check_gate(C, TRUST)) == ("FULL_MM", "full_mm", "M answer")
    assert decided(self_check_gate(C, FALL)) == ("FALLBACK", "parametric", "P answer")
    assert self_check("??") == ("TRUST", False) and self_check("I would FALLBACK") == ("FALLBACK", False)
    assert triage(j(decision="text_only")) == ("TEXT_ONLY", True)
    assert triage('I pick {"decision": "full_mm", "reason": "x"') == ("FULL_MM", True)  # broken JSON, found
    assert triage(j(decision="IMAGE_ONLY")) == ("FALLBACK", False)
    assert decided(triage_gate(C, j(decision="TEXT_ONLY"))) == ("TEXT_ONLY", "text_only", "T answer")
    # E.5: self-check first, then triage
    assert cascaded_router(C, FALL, j(decision="FULL_MM")).answer == "P answer"
    assert cascaded_router(C, TRUST, j(decision="TEXT_ONLY")).answer == "T answer"
    assert cascaded_router(C, TRUST, j(decision="FULL_MM")).answer == "M answer"
    assert cascaded_router(C, TRUST, "nonsense").route == "FALLBACK"
    assert cascaded_router(C, "```json\n{\"decision\": \"TRUST\"}\n```", j(decision="FULL_MM")).answer == "M answer"


def test_text_trust_states():
    assert text_trust(C, j(text_reliability="trustworthy")).answer == "T answer"
    for state in ("conflicting", "weak", "suspicious", "low"):
        assert text_trust(C, j(text_reliability=state)).answer == "P answer"
    assert text_trust(C, "?").parsed is False and text_trust(C, "?").answer == "P answer"


def test_answer_consensus_by_hand():
    assert token_f1("a b c", "a b d") == pytest.approx(2 * 2 / 6)
    assert token_f1("The Cat!", "the cat") == pytest.approx(1.0)  # case and punctuation are normalised away
    # all equal: every mean ties and the tie goes to Text-only (the release's default)
    assert answer_consensus(Candidates("x", "x", "x")).route == "CONSENSUS:TEXT_ONLY"
    # Parametric == Full-MM, Text-only unrelated: the pair competes alone, tie kept in source order
    r = answer_consensus(Candidates("alpha beta", "zzz", "alpha beta"))
    assert r.route == "CONSENSUS:PARAMETRIC" and json.loads(r.raw)["consensus_pair_used"] is True
    # the length tie-break: equal means, the longer answer wins
    r = answer_consensus(Candidates("q", "w", "e"), tie_break="parametric")
    assert r.route == "CONSENSUS:PARAMETRIC"


def test_verdicts_as_the_release_reads_them():
    assert parse_verdict(j(label="supported", score=1.0, reason="")) == ("supported", 1.0, True)
    assert parse_verdict(j(label="Partially_Supported")) == ("partially_supported", 0.5, True)
    assert parse_verdict("```json\n" + j(label="unsupported") + "\n```") == ("unsupported", 0.0, True)
    for raw in ("Verdict: supported.", "I cannot tell", j(label="mostly right"), "", j(verdict="supported")):
        assert parse_verdict(raw) == ("uncertain", 0.25, False)


# ------------------------------------------------------------------ bench replay

def _strip(src: Path, dst: Path) -> None:
    """A copy of a choices tree with every output field removed from every row."""
    for f in src.rglob("*.jsonl"):
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        method = f.name.split("_20.")[0]
        keep = [{k: v for k, v in json.loads(line).items() if k not in OUTPUT_FIELDS.get(method, ())}
                for line in f.read_text().splitlines() if line.strip()]
        out.write_text("".join(json.dumps(r) + "\n" for r in keep))


@pytest.mark.skipif(not SHARED.is_dir(), reason="the release excerpts live in ../shared beside the checkout")
def test_replay_reproduces_the_released_decisions_from_stripped_inputs(tmp_path):
    _strip(SHARED / "choices", tmp_path / "in" / "evaluation" / "choices")
    res = replay(tmp_path / "in", tmp_path / "out")
    assert res["agreement"] == {}  # nothing to agree with: every output field was stripped
    released = {}
    for f in (SHARED / "choices").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            released[(f.name.split("_20.")[0], rec["row_id"])] = rec
    got = {}
    for f in (tmp_path / "out" / "evaluation" / "choices").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            got[(f.name.split("_20.")[0], rec["row_id"])] = rec
    checked = 0
    for (method, rid), rec in released.items():
        for k in OUTPUT_FIELDS[method]:
            assert got[(method, rid)][k] == rec[k], (method, rid, k)
            checked += 1
    assert checked == 10 and any(m == "field_selector" for m, _ in released)
    # and replaying the files as released prints full agreement
    result = CliRunner().invoke(app, ["bench", "replay", "--choices", str(SHARED.parent), "--out",
                                      str(tmp_path / "o2"), "--json"])
    assert result.exit_code == 0, result.output
    agreement = json.loads(result.output)["gpt4omini/fava"]
    assert agreement["field_selector"] == {"agree": 2, "of": 2, "fields": ["final_decision", "chosen_source"],
                                           "disagree": []}


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_replay_of_soft_conductor_rows_derives_missing_files_and_reroutes(tmp_path):
    ds = tmp_path / "run" / "evaluation" / "choices" / "gpt4omini" / "longfact"
    soft = [  # the two released cases, and one with a self-check FALLBACK and conflicting text
        {"row_id": 0, "policy": "soft", "selfcheck_decision": "FALLBACK", "resolver_decision": "TEXT_ONLY",
         "text_reliability": "trustworthy", "final_decision": "TEXT_ONLY", "chosen_source": "text_only"},
        {"row_id": 1, "policy": "soft", "selfcheck_decision": "TRUST", "resolver_decision": "COMPOSE",
         "text_reliability": "conflicting", "final_decision": "COMPOSE", "chosen_source": "composed"},
        {"row_id": 2, "policy": "soft", "selfcheck_decision": "FALLBACK", "resolver_decision": "FULL_MM",
         "text_reliability": "conflicting", "final_decision": "FULL_MM", "chosen_source": "full_mm"}]  # wrong
    _write(ds, "soft_conductor_50.choices.jsonl", soft)
    _write(ds, "selfcheck_gate_50.choices.jsonl", [{"row_id": 5, "reasoning_raw": TRUST, "decision": "TRUST"}])
    _write(ds, "source_aware_selector_50.choices.jsonl",
           [{"row_id": 5, "decision": "TEXT_ONLY", "chosen_source": "text_only", "text_reliability": "weak",
             "raw_output": j(decision="TEXT_ONLY", text_reliability="weak")}])
    res = replay(tmp_path / "run", tmp_path / "out")
    a = res["agreement"]["gpt4omini/longfact"]["soft_conductor"]
    assert (a["agree"], a["of"], a["disagree"]) == (2, 3, [2])
    out = tmp_path / "out" / "evaluation" / "choices" / "gpt4omini" / "longfact"
    rows = [json.loads(x) for x in (out / "soft_conductor_50.choices.jsonl").read_text().splitlines()]
    assert [(r["final_decision"], r["chosen_source"]) for r in rows] == \
        [("TEXT_ONLY", "text_only"), ("COMPOSE", "composed"), ("FALLBACK", "parametric")]
    # a row without decisions gets them: Field-Selector derived from the self-check and the selector files
    fs = json.loads((out / "field_selector_50.choices.jsonl").read_text())
    assert (fs["row_id"], fs["final_decision"], fs["chosen_source"], fs["selfcheck_decision"]) == \
        (5, "FALLBACK", "parametric", "TRUST")  # weak text
    # the same rows under another released policy, no LLM call
    res = replay(tmp_path / "run", tmp_path / "strict", {"soft_conductor": "strict"})
    rows = [json.loads(x) for x in (tmp_path / "strict" / "evaluation" / "choices" / "gpt4omini" / "longfact"
                                    / "soft_conductor_50.choices.jsonl").read_text().splitlines()]
    assert [r["final_decision"] for r in rows] == ["FALLBACK", "COMPOSE", "FALLBACK"]
    assert all(r["policy"] == "strict" for r in rows)


def test_replay_refuses_what_it_cannot_read(tmp_path):
    from mmaudit.errors import InputError

    with pytest.raises(InputError, match="no <stack>"):
        replay(tmp_path, tmp_path / "o")
    ds = tmp_path / "evaluation" / "choices" / "s" / "d"
    _write(ds, "field_selector_2.choices.jsonl", [{"row_id": 1}])
    (ds / "field_selector_2.choices.jsonl").write_text('{"row_id": 1}\nnot json\n')
    with pytest.raises(InputError, match="field_selector_2.choices.jsonl:2"):
        replay(tmp_path, tmp_path / "o")
    with pytest.raises(InputError, match="METHOD=POLICY"):
        replay(tmp_path, tmp_path / "o", {"field_selector": "lenient"})
    shutil.rmtree(tmp_path / "evaluation")
