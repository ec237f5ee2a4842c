"""Real-dataset loaders on fixtures in each dataset's own format, written here; bad records are named."""

import json

import numpy as np
import pytest
from PIL import Image

from mmaudit.data.loaders import load_chartqa, load_docvqa, load_mme, select_balanced
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.models.hf.registry import PAPER_MODELS, check_supported, lookup


def png(path, value=128):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((20, 30, 3), value, np.uint8)).save(path)


def split(items):
    items = list(items)
    return [x for x in items if isinstance(x, Sample)], [x for x in items if isinstance(x, InputError)]


def test_chartqa(tmp_path):
    png(tmp_path / "test" / "png" / "a.png")
    recs = [{"imgname": "a.png", "query": "What is the peak?", "label": "42"},
            {"imgname": "a.png", "query": "Which country?", "label": "Spain"},
            {"imgname": "missing.png", "query": "q?", "label": "1"}, {"query": "no image", "label": "1"}]
    (tmp_path / "test" / "test_human.json").write_text(json.dumps(recs))
    ok, bad = split(load_chartqa(tmp_path / "test" / "test_human.json"))
    assert [(s.question, s.answer, s.answer_type, s.task_family) for s in ok] == [
        ("What is the peak?", "42", "number", "chartqa"), ("Which country?", "Spain", "free text", "chartqa")]
    assert [(e.sample_id, e.field) for e in bad] == [("chartqa:test_human.json:2", "image"),
                                                     ("chartqa:test_human.json:3", "imgname")]


def test_docvqa(tmp_path):
    png(tmp_path / "documents" / "d1.png")
    data = {"data": [{"questionId": 7, "question": "What is the date?", "answers": ["1 May", "May 1"],
                      "image": "documents/d1.png"},
                     {"questionId": 8, "question": "Total?", "answers": [], "image": "documents/d1.png"}]}
    (tmp_path / "val_v1.0.json").write_text(json.dumps(data))
    ok, bad = split(load_docvqa(tmp_path / "val_v1.0.json"))
    assert ok[0].answer == "1 May" and ok[0].meta["answers"] == ["1 May", "May 1"] and ok[0].task_family == "docvqa"
    assert (bad[0].sample_id, bad[0].field) == ("docvqa:8", "answers")
    (tmp_path / "broken.json").write_text("{")
    (err,) = load_docvqa(tmp_path / "broken.json")
    assert isinstance(err, InputError) and err.sample_id == "broken.json"


def test_mme_both_layouts(tmp_path):
    art = tmp_path / "artwork"
    png(art / "images" / "1.jpg")
    (art / "questions_answers_YN").mkdir(parents=True)
    (art / "questions_answers_YN" / "1.txt").write_text("Is this by Monet?\tYes\nIs this a photo?\tNo\n")
    code = tmp_path / "code_reasoning"
    png(code / "0001.png")
    (code / "0001.txt").write_text("Does the code print 3?\tYes\nbroken line without tab\n")
    ok, bad = split(load_mme(tmp_path))
    assert [(s.answer, s.answer_type, s.meta["category"]) for s in ok] == [
        ("Yes", "yes/no", "artwork"), ("No", "yes/no", "artwork"), ("Yes", "yes/no", "code_reasoning")]
    assert (bad[0].sample_id, bad[0].field) == ("mme:code_reasoning/0001:2", "line")


def test_balanced_selection_is_reproducible():
    def fake(name, n):
        return [Sample(f"{name}-{i:03d}", np.zeros((4, 4, 3), np.uint8), "q?", "1", "number", name) for i in range(n)]

    by = {"chartqa": fake("chartqa", 700), "docvqa": fake("docvqa", 600), "mme": fake("mme", 520)}
    a = select_balanced(by, 1500, seed=3)
    assert len(a) == 1500 and [s.id for s in a] == [s.id for s in select_balanced(by, 1500, seed=3)]
    assert {f: sum(s.task_family == f for s in a) for f in by} == {"chartqa": 500, "docvqa": 500, "mme": 500}
    assert [s.id for s in a] != [s.id for s in select_balanced(by, 1500, seed=4)]
    with pytest.raises(ValueError, match="mme: 520 samples, 600 needed"):
        select_balanced(by, 1800)


def test_registry_lists_the_papers_18_models_by_level():
    levels = [e.level for e in PAPER_MODELS]
    assert len(PAPER_MODELS) == 18 and (levels.count("L1"), levels.count("L2"), levels.count("L3")) == (4, 7, 7)
    assert lookup("qwen2.5-vl-3b").hub_id == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert check_supported("Qwen2.5-VL-7B").level == "L2"
    assert check_supported("Qwen-VL-Chat").model_type == "qwen"  # the native implementation
    assert sum(e.supported for e in PAPER_MODELS) == 18
    assert check_supported("DeepSeek-VL-7B").model_type == "deepseek_vl_hybrid"
    assert check_supported("Gemma4-E4B").model_type == "gemma4"


@pytest.mark.parametrize("build,family", [("tiny_gemma4", "gemma4"), ("tiny_deepseek_vl", "deepseek_vl_hybrid")])
def test_load_hf_builds_gemma4_and_deepseek_vl_through_their_adapters(tmp_path, build, family):
    import torch

    from mmaudit.models.hf import load_hf, tiny
    from mmaudit.models.hf.families import families

    model, tok, ip = getattr(tiny, build)(seed=0)
    for part in (model, tok, ip):
        part.save_pretrained(tmp_path)
    vlm = load_hf(tmp_path, dtype="float32")
    assert type(vlm) is families()[family].adapter and vlm.chat_template
    x = torch.rand(1, 3, 48, 64, requires_grad=True)
    assert isinstance(vlm.generate(x.detach(), ["what ?"], max_new_tokens=3)[0], str)
    vlm.score(x, ["what ?"], ["1"]).sequence_logprob().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_audit_reads_the_datasets_own_formats(tmp_path):
    from typer.testing import CliRunner

    from dataset_files import write_chartqa
    from mmaudit.cli import app

    write_chartqa(tmp_path, 3, ({"imgname": "nope.png", "query": "q?", "label": "1"},))
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L2", "--data", f"chartqa:{tmp_path}/test/test_human.json",
                                   "--attacks", "end_pgd,typo_evid", "--steps", "3", "--n-boot", "50", "--ocr-limit",
                                   "0", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["models"][0]["n"] == 3 and len(summary["errors"]) == 1
    assert summary["errors"][0]["sample"] == "chartqa:test_human.json:3"


def test_docvqa_answers_are_all_accepted_by_the_judge(tmp_path):
    from mmaudit.judge.match import Judge
    from mmaudit.pathways.wrong import wrong_answer

    png(tmp_path / "documents" / "d1.png")
    data = {"data": [{"questionId": 1, "question": "Date?", "answers": ["1 May 1999", "May 1, 1999"],
                      "image": "documents/d1.png"}]}
    (tmp_path / "a.json").write_text(json.dumps(data))
    (s,) = load_docvqa(tmp_path / "a.json")
    j = Judge()
    assert j.correct("may 1, 1999", s) and j.correct("1 May 1999", s) and not j.correct("June 3", s)
    w = wrong_answer(s, j)
    assert not any(j(w, r, "docvqa", s.answer_type) for r in s.references)
