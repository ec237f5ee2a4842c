"""`bench ablate`: the resolver field ablation (G.8) and the router component ablation (G.9) with scripted models
whose right answers are known by construction."""

import pytest

from mmaudit.models.chat import ScriptedChat
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.evaluate.ablate import ablate_components, ablate_fields
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.run import load_rows
from mmaudit.rag.evaluate.schemas import RESOLVER_FIELDS


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    build_benchmark(mini_inputs()[:2], folder, BuildConfig(patch_steps=3, style_steps=3))
    return folder


def world(folder):
    """A scripted stack: answers from polluted text are wrong ('-bad'), the judge knows it; the resolver flags
    polluted text only when its prompt still asks for text_reliability; the self-check falls back on it."""
    rows = load_rows(folder)
    clean = {t.snippet for r in rows if r.regime.startswith("TC") for t in r.text_evidence}
    polluted = {t.snippet[:60] for r in rows if r.regime.startswith("TP") for t in r.text_evidence} - \
        {c[:60] for c in clean}

    def reply(messages):
        p = messages[-1]["content"]
        bad = any(s in p for s in polluted)
        if p.startswith("You grade factuality"):
            answer = p.split("MODEL ANSWER:\n", 1)[1].split("\n", 1)[0]
            return '{"label": "%s"}' % ("unsupported" if answer.endswith("-bad") else "supported")
        if p.startswith("You are a source-aware"):
            rel = ('"text_reliability": "%s", ' % ("conflicting" if bad else "trustworthy")
                   if "- text_reliability:" in p else "")
            return "{" + rel + '"decision": "TEXT_ONLY"}'
        if p.startswith("You are a retrieval trust gate") and "TRUST" in p:
            return '{"decision": "%s"}' % ("FALLBACK" if bad else "TRUST")
        if p.startswith("You are a retrieval trust gate"):
            return '{"decision": "TEXT_ONLY"}'
        if "TEXT EVIDENCE:\n\n" in p:
            return "P: parametric"
        branch = "M" if "image text (OCR)" in p else "T"
        return f"{branch}: answer-" + ("bad" if bad else "good")
    return reply


def test_field_ablation_finds_the_field_the_route_reads(mini, tmp_path):
    chat = ScriptedChat(world(mini))
    table = {r["ablation"]: r for r in ablate_fields(mini, chat, tmp_path, cfg=BenchConfig(stack="s"))}
    assert set(table) == {"full Field-Selector"} | {f"w/o {f}" for f in RESOLVER_FIELDS}
    full = table["full Field-Selector"]
    assert (full["tc"], full["tp"]) == (1.0, 1.0)  # polluted text flagged -> Parametric, which is right
    drop = table["w/o text_reliability"]
    assert (drop["tc"], drop["tp"], drop["d_tp"]) == (1.0, 0.0, -1.0) and drop["d_balanced"] == -0.5
    for f in RESOLVER_FIELDS[1:]:  # the other fields are not routing inputs here
        assert table[f"w/o {f}"]["d_tp"] == 0.0 and table[f"w/o {f}"]["d_balanced"] == 0.0
    prompts = [c[-1]["content"] for c in chat.calls if c[-1]["content"].startswith("You are a source-aware")]
    no_text = [p for p in prompts if "do not output or use these criteria: text_reliability" in p]
    assert no_text and all("- text_reliability:" not in p for p in no_text)


def test_component_ablation_self_check_triage_cascade(mini, tmp_path):
    table = {r["ablation"]: r for r in ablate_components(mini, ScriptedChat(world(mini)), tmp_path,
                                                          cfg=BenchConfig(stack="s"))}
    assert [(table[k]["tc"], table[k]["tp"]) for k in ("Self-check only", "Triage only", "Cascaded Router")] == \
        [(1.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
    assert all(r["failed"] == 0 for r in table.values())


def test_ablate_command(mini, tmp_path):
    pytest.importorskip("openai")
    from typer.testing import CliRunner

    from mmaudit.cli import app
    from mmaudit.models.chat.local_server import LocalChatServer

    with LocalChatServer() as srv:
        for flag in ("--fields", "--components"):
            res = CliRunner().invoke(app, ["bench", "ablate", flag, "--folder", str(mini), "--out", str(tmp_path),
                                           "--model", f"m@{srv.base_url}"])
            assert res.exit_code == 0, res.output
    assert (tmp_path / "ablate-fields.json").exists() and (tmp_path / "ablate-components.json").exists()
    assert "w/o candidate_scores" in (tmp_path / "ablate-fields.json").read_text()
    res = CliRunner().invoke(app, ["bench", "ablate", "--folder", str(mini), "--out", str(tmp_path)])
    assert res.exit_code != 0 and "choose one of" in res.output
