"""docs/python.md runs as written: its Python blocks, top to bottom in one namespace (in a scratch folder), and
docs/report.md's compare example (the audits cut to a few questions)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

DOCS = Path(__file__).resolve().parents[1] / "docs"


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def test_every_python_block_of_docs_python_md_runs(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("pandas")
    from mmaudit.pathways import registry

    monkeypatch.chdir(tmp_path)
    code = blocks("python.md", "python")
    assert len(code) >= 6
    namespace: dict = {}
    try:
        for i, block in enumerate(code):
            exec(compile(block, f"docs/python.md block {i + 1}", "exec"), namespace)  # noqa: S102 - our own docs
    finally:
        registry.unregister("doc_first_token")
    assert namespace["adv"].shape == namespace["images"].shape
    assert (tmp_path / "runs" / "python-demo" / "report.html").is_file()


def test_the_compare_example_of_docs_report_md_runs(tmp_path, monkeypatch):
    from mmaudit.cli import app

    monkeypatch.chdir(tmp_path)
    (bash,) = [b for b in blocks("report.md", "bash") if "runs/eps4-vs-8" in b]
    small = ["--data", "synthetic:1", "--attacks", "end_pgd,typo_evid", "--steps", "3", "--recovery", "0",
             "--ocr-limit", "0", "--n-boot", "50"]
    for line in filter(None, (x.strip() for x in bash.splitlines())):
        args = shlex.split(line)
        assert args[0] == "mmaudit"
        res = CliRunner().invoke(app, args[1:] + (small if args[1] == "audit" else []))
        assert res.exit_code == 0, f"{line}\n{res.output}"
    assert (tmp_path / "runs" / "eps4-vs-8" / "compare.html").is_file()
