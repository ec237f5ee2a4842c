"""Hostile inputs are per-sample errors everywhere: decompression bombs refused before decoding, paths that leave
the dataset folder, wrong JSON types, unreadable files; odd images converted and said."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.hostile import bomb_png, write_hostile
from mmaudit.data.images import MAX_PIXELS, load_rgb
from mmaudit.data.io import iter_jsonl
from mmaudit.errors import InputError


@pytest.fixture
def hostile(tmp_path):
    """A dataset folder: two good samples, four unreadable files, a path out of the folder, a wrong type, a
    non-object row, and five odd-but-fine images."""
    return write_hostile(tmp_path)


def test_the_bomb_is_refused_before_decoding(tmp_path):
    (tmp_path / "b.png").write_bytes(bomb_png())
    assert (tmp_path / "b.png").stat().st_size < 50_000
    with pytest.raises(InputError, match=r"decompression bomb refused before decoding.*400000000 pixels"):
        load_rgb(tmp_path / "b.png", "s1")
    (tmp_path / "m.png").write_bytes(bomb_png(3000, 3000))  # under PIL's limit, over ours when we lower it
    with pytest.raises(InputError, match=r"3000 x 3000 = 9000000 pixels > max_pixels 1000000"):
        load_rgb(tmp_path / "m.png", "s2", max_pixels=1_000_000)
    assert MAX_PIXELS < 20000 * 20000


def test_every_hostile_row_is_an_error_with_its_reason_and_odd_images_are_converted(hostile):
    items = list(iter_jsonl(hostile / "samples.jsonl"))
    errors = {e.sample_id: (e.field, e.reason) for e in items if isinstance(e, InputError)}
    samples = {s.id: s for s in items if not isinstance(s, InputError)}
    assert "decompression bomb" in errors["bomb"][1] and "400000000" in errors["bomb"][1]
    for sid in ("truncated", "empty", "text"):
        assert errors[sid][0] == "image" and "not a readable image" in errors[sid][1]
    assert "leaves the dataset folder" in errors["escape"][1]
    assert errors["typed"] == ("question", "expected str, got list")
    assert any("expected a JSON object" in r for _, r in errors.values())
    notes = {sid: samples[sid].meta["input_notes"] for sid in ("cmyk", "deep", "palette", "alpha", "anim")}
    assert "CMYK image converted to RGB" in notes["cmyk"]
    assert any("scaled to 8-bit" in n for n in notes["deep"])
    assert samples["deep"].image[0, 0, 0] == round(40000 / 65535 * 255)
    assert any("transparency laid on white" in n for n in notes["palette"] + notes["alpha"])
    assert any("animated (2 frames): first frame used" in n for n in notes["anim"])
    for s in samples.values():
        assert s.image.dtype == np.uint8 and s.image.ndim == 3 and s.image.shape[2] == 3


def test_an_audit_over_hostile_rows_completes_and_lists_them(hostile, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--n-boot", "100", "--data",
                                   str(hostile / "samples.jsonl"), "--steps", "2", "--attacks", "end_pgd",
                                   "--recovery", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    errors = {e["sample"]: e for e in json.loads((out / "summary.json").read_text())["errors"]}
    assert {"bomb", "truncated", "empty", "text", "escape", "typed"} <= set(errors)
    assert "decompression bomb" in errors["bomb"]["reason"]


def test_bench_build_reports_hostile_images_per_question(hostile, tmp_path):
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.inputs import read_questions
    from mmaudit.rag.construct.mini import mini_inputs

    lines = []
    for qid, image in (("q-bomb", "bomb.png"), ("q-trunc", "truncated.png"), ("q-empty", "empty.png"),
                       ("q-text", "text.png"), ("q-escape", "../outside.png"), ("q-cmyk", "cmyk.jpg")):
        lines.append({"qid": qid, "question": "Where is it?", "subject": "x",
                      "passages": [{"snippet": "It was built in 1900 in Paris by Gustave Eiffel."}],
                      "images": [{"path": image, "alt_text": "x"}]})
    lines.append({"qid": "q-typed", "question": 7, "passages": [], "images": []})
    (hostile / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    items = read_questions(hostile / "q.jsonl") + mini_inputs()[:2]
    s = build_benchmark(items, tmp_path / "out", BuildConfig(patch_steps=3, style_steps=3))
    reasons = {str(d["qid"]): d["reason"] for d in s["drops"]}
    assert "decompression bomb" in reasons["q-bomb"] and "400000000" in reasons["q-bomb"]
    for q in ("q-trunc", "q-empty", "q-text"):
        assert "not a readable image" in reasons[q]
    assert "leaves the dataset folder" in reasons["q-escape"]
    assert "expected a string" in reasons["q.jsonl:7"]
    assert s["counts"]["final"] >= 2  # the good questions are built
    assert {"qid": "q-cmyk", "note": "CMYK image converted to RGB"} in s["image_notes"]
    assert "q-cmyk" not in reasons or "image" not in reasons["q-cmyk"].split(":")[0]  # read; its drop, if any,
    # is a later stage's (a flat test image gives the rewrite operator nothing to rewrite)
