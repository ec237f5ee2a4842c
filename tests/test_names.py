"""One name per concept: the old spellings users may have in scripts still work, each with a one-line note that
names the new one."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mmaudit.cli import app

SMALL = ["--model", "zoo:L1", "--data", "synthetic:1", "--recovery", "0", "--ocr-limit", "0", "--n-boot", "20"]


def test_old_audit_flags_work_with_a_note(tmp_path):
    res = CliRunner().invoke(app, ["audit", *SMALL, "--attacks", "end_pgd", "--steps", "2", "--end-pgd-loss", "margin",
                                   "--checkpoint", "mlp", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "--end-pgd-loss is deprecated: use --attack end_pgd:loss=margin" in res.output
    assert res.output.count("--checkpoint is deprecated: use --activation-checkpointing mlp") == 1
    recs = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert {r["params"]["loss"] for r in recs if r["kind"] == "attack"} == {"margin"}  # the old flag still acts
    (run,) = [r for r in recs if r["kind"] == "run"]
    assert run["params"]["placement"]["activation_checkpointing"] == "mlp"


def test_the_old_endpoint_spelling_is_read_as_the_new_one_with_a_note(tmp_path, capsys):
    from mmaudit.cli.bench import budgets_option, stack_spec
    from mmaudit.models.chat.backends import make_chat, parse

    assert parse("gpt-4o@https://api.example/v1") == ("endpoint", "gpt-4o@https://api.example/v1", True)
    assert parse("endpoint:gpt-4o@https://api.example/v1") == ("endpoint", "gpt-4o@https://api.example/v1", False)
    assert stack_spec("gpt-4o", "https://api.example/v1") == "endpoint:gpt-4o@https://api.example/v1"
    chat = make_chat("gpt-4o@https://api.example/v1", tmp_path / "calls.jsonl")
    assert (chat.model, chat.base_url) == ("gpt-4o", "https://api.example/v1")
    assert budgets_option({"max_tokens": "answer=8", "token_budgets": None}) == "answer=8"
    out = capsys.readouterr().out
    assert "write endpoint:gpt-4o@https://api.example/v1" in out and "use --token-budgets" in out


def test_an_unknown_chat_spec_names_the_grammar():
    import pytest

    from mmaudit.errors import UsageError
    from mmaudit.models.chat.backends import parse

    with pytest.raises(UsageError, match="write one of .*endpoint:MODEL@URL.*embedded"):
        parse("gpt-4o")
