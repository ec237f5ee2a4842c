"""`bench run` plumbing with a scripted model: every method judged, TextTrust once per text input, tables read back."""

import json

import pytest

from mmaudit.models.chat import ScriptedChat
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.methods import methods
from mmaudit.rag.evaluate.run import run_bench
from mmaudit.rag.evaluate.score import judged_rows, main_table


def scripted(messages):
    p = messages[-1]["content"]
    if p.startswith("You grade factuality"):
        answer = p.split("MODEL ANSWER:\n", 1)[1].split("\n", 1)[0]
        return json.dumps({"label": "supported" if answer.startswith("T") else "unsupported"})
    if p.startswith("You are a text-evidence reliability gate"):
        return json.dumps({"text_reliability": "suspicious" if "Contrary" in p else "trustworthy"})
    if p.startswith("You are a source-aware"):
        return json.dumps({"text_reliability": "trustworthy", "decision": "TEXT_ONLY"})
    if "TRUST" in p and "retrieval trust gate" in p:
        return json.dumps({"decision": "TRUST"})
    if "retrieval trust gate" in p:
        return "no json here"  # the triage gate misbehaves: recorded, treated as FALLBACK
    if "TEXT EVIDENCE:\n\n" in p:
        return "P: parametric answer"
    return "T: evidence answer" if "image text (OCR)" not in p else "M: multimodal answer"


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    build_benchmark(mini_inputs()[:3], folder, BuildConfig(patch_steps=4, style_steps=4))
    return folder


def test_bench_run_with_a_scripted_model(mini, tmp_path):
    chat = ScriptedChat(scripted)
    s = run_bench(mini, chat, tmp_path, cfg=BenchConfig(stack="scripted"))
    assert s["rows"] == 48 and s["questions"] == 3
    n_text_trust = sum(c[-1]["content"].startswith("You are a text-evidence") for c in chat.calls)
    assert n_text_trust == 6  # one per (question, clean or polluted text), reused over the 8 image regimes
    assert s["unparsed_decisions"]["triage_gate"] == 48 and s["unparsed_verdicts"] == 0
    per = judged_rows(tmp_path, "scripted")
    assert set(per) == set(methods())
    table = {r["method"]: r for r in main_table(tmp_path, "scripted")}
    assert table["text_only"]["tc"] == 1.0 and table["parametric"]["tc"] == 0.0
    assert table["field_selector"]["tc"] == 1.0  # trustworthy text + TEXT_ONLY -> the Text-only answer
    assert table["triage_gate"]["tc"] == 0.0  # unparsed triage -> FALLBACK -> Parametric
    rows = [json.loads(x) for x in (tmp_path / "evaluation" / "judged" / "scripted" / "mini" /
                                    "triage_gate_3.judged.jsonl").read_text().splitlines()]
    assert all(r["decision_raw"] == "no json here" and not r["decision_parsed"] for r in rows)


def test_bench_run_command_writes_tables_and_report(mini, tmp_path):
    pytest.importorskip("openai")
    from typer.testing import CliRunner

    from mmaudit.cli import app
    from mmaudit.models.chat.local_server import LocalChatServer

    with LocalChatServer() as srv:
        res = CliRunner().invoke(app, ["bench", "run", "--folder", str(mini), "--out", str(tmp_path),
                                       "--endpoint", srv.base_url, "--model", "echo", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    for title in ("Main table", "Paired deltas", "by image attack", "Channel isolation", "Decisions", "Route accuracy"):
        assert title in res.output
    report = (tmp_path / "report.md").read_text()
    assert "unparsed verdicts" in report and "Main table" in report


def test_a_runs_choices_replay_to_the_same_decisions(mini, tmp_path):
    """The choices a run writes are the release's layout: replaying them recomputes every decision, and
    they all agree (the resolvers re-read from their raw replies, the gates from theirs)."""
    from mmaudit.rag.evaluate.replay import replay

    run_bench(mini, ScriptedChat(scripted), tmp_path, cfg=BenchConfig(stack="scripted"))
    choices = tmp_path / "evaluation" / "choices" / "scripted" / "mini"
    assert {p.name.split("_3.")[0] for p in choices.glob("*.choices.jsonl")} >= {
        "selfcheck_gate", "triage_gate", "cascaded_router", "source_aware_selector", "source_aware_conductor",
        "field_selector", "soft_conductor"}
    res = replay(tmp_path, tmp_path / "replayed")
    agreement = res["agreement"]["scripted/mini"]
    assert set(agreement) >= {"field_selector", "soft_conductor", "cascaded_router", "source_aware_selector"}
    assert all(a["agree"] == a["of"] == 48 for a in agreement.values()), agreement
