"""What the model is asked: each dataset's answer-format instruction, --prompt-suffix, and the clean-accuracy check."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from dataset_files import write_chartqa
from mmaudit.cli import app
from mmaudit.data.datasets import instruction
from mmaudit.data.synthetic import make_sample

pytest.importorskip("transformers")

INSTRUCTION = instruction("chartqa")


@pytest.fixture(scope="module")
def chartqa(tmp_path_factory):
    return write_chartqa(tmp_path_factory.mktemp("chartqa"), 2)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from mmaudit.models.hf.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "qwen")


def audit(*args):
    res = CliRunner().invoke(app, ["audit", "--attacks", "typo_evid", "--n-boot", "20", "--ocr-limit", "0", *args])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_chartqa_question_reaches_the_model_with_its_instruction(chartqa, tiny_checkpoint, tmp_path, monkeypatch):
    from mmaudit.models.hf.base import HFAdapter

    annotations, recs = chartqa
    shown: list[str] = []
    real = HFAdapter.prompt_text
    monkeypatch.setattr(HFAdapter, "prompt_text",
                        lambda self, q, ii, i: shown.append(real(self, q, ii, i)) or shown[-1])
    audit("--model", f"{tiny_checkpoint}@L2", "--data", f"chartqa:{annotations}", "--out", str(tmp_path / "a"))
    asked = [f"{r['query']}\n{INSTRUCTION}<|im_end|>" for r in recs]  # the instruction on its own line, then the turn
    assert shown and all(any(a in t for a in asked) for t in shown)

    shown.clear()
    audit("--model", f"{tiny_checkpoint}@L2", "--data", f"chartqa:{annotations}", "--prompt-suffix", "",
          "--out", str(tmp_path / "b"))
    assert shown and all(INSTRUCTION not in t for t in shown)
    assert all(any(f"{r['query']}<|im_end|>" in t for r in recs) for t in shown)  # the bare question

    recs_a = [json.loads(x) for x in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    recs_b = [json.loads(x) for x in (tmp_path / "b" / "results.jsonl").read_text().splitlines()]
    run = next(r for r in recs_a if r["kind"] == "run")
    assert run["params"]["prompts"] == {"chartqa": INSTRUCTION}
    assert next(r for r in recs_b if r["kind"] == "run")["params"]["prompts"] == {"chartqa": ""}
    clean_a = [r for r in recs_a if r["kind"] == "clean"]
    assert all(r["prompt"].endswith("\n" + INSTRUCTION) for r in clean_a)
    keys_b = {r["key"] for r in recs_b if r["kind"] == "clean"}
    assert not {r["key"] for r in clean_a} & keys_b  # the prompt is part of every record's key
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["validity"]["prompts"] == {"chartqa": INSTRUCTION}
    page = (tmp_path / "a" / "report.html").read_text()
    assert INSTRUCTION in page and "instruction after the question" in page


def test_a_jsonl_row_brings_its_own_instruction(tmp_path):
    from mmaudit.data.io import iter_jsonl

    s = make_sample("charts", 0, seed=1)
    Image.fromarray(s.image).save(tmp_path / "a.png")
    rows = [{"image": "a.png", "question": "How many?", "answer": "3", "instruction": "Reply with a number."},
            {"image": "a.png", "question": "How many?", "answer": "3", "instruction": 7}]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    good, bad = list(iter_jsonl(tmp_path / "s.jsonl"))
    assert good.prompt == "How many?\nReply with a number." and bad.field == "instruction"


def test_clean_accuracy_below_the_check_warns_in_terminal_summary_and_report(tiny_checkpoint, tmp_path):
    """A random-weight model answers nothing right: the check says so everywhere, naming the likely causes."""
    out = audit("--model", f"{tiny_checkpoint}@L2", "--data", "synthetic:2", "--out", str(tmp_path))
    assert "Warning:" in out and "clean accuracy 0.0%" in out and "chat template" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    warnings = summary["validity"]["warnings"]
    assert warnings and all("below the" in w and "preprocessing" in w for w in warnings)
    assert {r["dataset"] for r in summary["validity"]["clean"] if not r["valid"]} == {"charts", "documents", "scenes"}
    page = (tmp_path / "report.html").read_text()
    assert page.count("validity-warning") == len(warnings)


def test_the_trained_zoo_passes_the_check(tmp_path):
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L2", "--data", "synthetic:2", "--attacks", "typo_evid",
                                   "--n-boot", "20", "--ocr-limit", "0", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["validity"]["warnings"] == [] and all(r["valid"] for r in summary["validity"]["clean"])
