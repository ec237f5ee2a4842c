"""ChartQA and MME in the lmms-lab Hugging Face layouts (parquet, read with the datasets library) audit to the same
records as the same questions in the original layouts: the same samples, instructions, judge rules and keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from dataset_files import write_chartqa, write_lmms_parquet, write_mme
from mmaudit.cli import app
from mmaudit.data.sources import load_data

pytest.importorskip("datasets")
ARGS = ["--model", "zoo:L1", "--attacks", "end_pgd,typo_evid", "--steps", "3", "--recovery", "0", "--ocr-limit", "1",
        "--n-boot", "50", "--wrong-ocr", "off"]


def records(run: Path) -> list[dict]:
    out = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    return sorted((r for r in out if r["kind"] in ("clean", "attack", "ocr")), key=lambda r: r["key"])


def chartqa_pair(tmp_path: Path) -> tuple[str, str]:
    path, recs = write_chartqa(tmp_path / "orig", 3)
    images = [Image.open(path.parent / "png" / r["imgname"]) for r in recs]
    hf = write_lmms_parquet(tmp_path / "lmms-chartqa" / "data" / "test-00000-of-00001.parquet", {
        "type": ["human_test"] * len(recs), "question": [r["query"] for r in recs],
        "answer": [r["label"] for r in recs], "image": images})
    return f"chartqa:{path}", f"chartqa:{hf.parents[1]}"


def mme_pair(tmp_path: Path) -> tuple[str, str]:
    rows = write_mme(tmp_path / "MME", 2)
    hf = write_lmms_parquet(tmp_path / "lmms-mme" / "test.parquet", {
        "question_id": [f"{c}/{name}" for c, name, _, _ in rows], "category": [c for c, *_ in rows],
        "question": [q for *_, q, _ in rows], "answer": [a for *_, a in rows],
        "image": [Image.open(tmp_path / "MME" / c / name) for c, name, _, _ in rows]})
    return f"mme:{tmp_path / 'MME'}", f"mme:{hf.parent}"


@pytest.mark.parametrize("pair", [chartqa_pair, mme_pair], ids=["chartqa", "mme"])
def test_the_lmms_lab_layout_audits_to_the_records_of_the_original_layout(tmp_path, pair):
    original, lmms = pair(tmp_path)
    a, b = load_data(original).samples, load_data(lmms).samples
    assert [s.id for s in a] == [s.id for s in b] and len(a) >= 3
    assert all((s.question, s.answer, s.instruction, s.task_family, s.answer_type) ==
               (t.question, t.answer, t.instruction, t.task_family, t.answer_type) and (s.image == t.image).all()
               for s, t in zip(a, b))
    for name, spec in (("original", original), ("lmms", lmms)):
        res = CliRunner().invoke(app, ["audit", "--data", spec, *ARGS, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    assert records(tmp_path / "original") == records(tmp_path / "lmms")


def test_a_bad_row_is_named_and_the_rest_load(tmp_path):
    img = Image.new("RGB", (32, 32), "white")
    hf = write_lmms_parquet(tmp_path / "x" / "test.parquet", {
        "type": ["human_test", "human_test"], "question": ["What is shown?", ""], "answer": ["3", "4"],
        "image": [img, img]})
    loaded = load_data(f"chartqa:{hf.parent}")
    assert len(loaded.samples) == 1 and [(e.sample_id, e.field) for e in loaded.errors] == [
        ("chartqa:test_human.json:1", "question")]
    missing = CliRunner().invoke(app, ["audit", "--data", f"chartqa:{tmp_path / 'nowhere' / 'x.json'}", *ARGS])
    assert missing.exit_code == 2 and "no such file or folder" in missing.output
