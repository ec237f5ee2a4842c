"""`mmaudit bench score` on judged files in the released layout, against hand-computed numbers."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.errors import InputError
from mmaudit.rag.evaluate.score import main_table

IMG = ["IC", "IP_caption_flip", "IP_entity_swap", "IP_semantic_rewrite", "IP_typography", "IP_adv_patch",
       "IP_blend", "IP_style"]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "qimg7-format"


def write(root, stack, dataset, method, scores):
    """scores[q] = (tc score for all 8 TC regimes, tp score for each of the 8 TP regimes)."""
    d = root / "evaluation" / "judged" / stack / dataset
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    for q, (tc, tps) in enumerate(scores):
        rows += [{"qid": q, "regime": f"TC_{r}", "baseline": method, "score": tc} for r in IMG]
        rows += [{"qid": q, "regime": f"TP_{r}", "baseline": method, "label": lab} for r, lab in zip(IMG, tps)]
    (d / f"{method}_{len(scores)}.judged.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_main_table_by_hand(tmp_path):
    sup, part, unc, uns = "supported", "partially_supported", "uncertain", "unsupported"
    # dataset A: q0 TC 1.0, TP 4x supported + 4x unsupported = 0.5; q1 TC 0.5, TP all uncertain = 0.25
    write(tmp_path, "s", "a", "full_mm", [(1.0, [sup] * 4 + [uns] * 4), (0.5, [unc] * 8)])
    # dataset B: q0 TC 0.0, TP all partially = 0.5
    write(tmp_path, "s", "b", "full_mm", [(0.0, [part] * 8)])
    (row,) = main_table(tmp_path)
    tc_a, tp_a = (1.0 + 0.5) / 2, (0.5 + 0.25) / 2
    tc_b, tp_b = 0.0, 0.5
    assert row["method"] == "full_mm"
    assert row["tc"] == pytest.approx((tc_a + tc_b) / 2)  # 0.375
    assert row["tp"] == pytest.approx((tp_a + tp_b) / 2)  # 0.4375
    assert row["drop"] == pytest.approx(row["tc"] - row["tp"])
    assert row["balanced"] == pytest.approx((row["tc"] + row["tp"]) / 2)


def test_cli_json_and_stack_choice(tmp_path):
    write(tmp_path, "s1", "a", "text_only", [(1.0, ["supported"] * 8)])
    write(tmp_path, "s2", "a", "text_only", [(0.0, ["unsupported"] * 8)])
    res = CliRunner().invoke(app, ["bench", "score", "--judged", str(tmp_path), "--stack", "s1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"method": "text_only", "tc": 1.0, "tp": 1.0, "drop": 0.0, "balanced": 1.0}]
    with pytest.raises(InputError, match="stack"):
        main_table(tmp_path)  # two stacks and none chosen


def test_released_excerpt_reads(tmp_path):
    if not SHARED.exists():
        pytest.skip("shared/qimg7-format not beside the checkout")
    shutil.copytree(SHARED / "evaluation", tmp_path / "evaluation")
    (row,) = main_table(tmp_path, "gpt4omini")
    assert row["method"] == "full_mm" and row["datasets"] == ["fava"]
    assert row["tc"] == 1.0 and row["tp"] == 0.0  # the excerpt's two rows: TC_IC supported, TP_* unsupported
