"""Acceptance: the shipped zoo reads charts, documents, scenes and overlaid text from pixels."""

import pytest

from mmaudit.data.synthetic import synthetic_set
from mmaudit.models.zoo import model_card
from mmaudit.models.zoo.evaluate import accuracy_by_family


@pytest.fixture(scope="module")
def heldout():
    return synthetic_set(200, seed=10_000)  # 800 questions, 200 per family, never trained on


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_shipped_model_accuracy(zoo, heldout, level):
    acc = accuracy_by_family(zoo[level], heldout)
    assert acc["overall"] >= 90.0, acc
    for family in ("charts", "documents", "scenes"):
        assert acc[family] >= 85.0, acc
    assert acc["reading"] >= 85.0, acc


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_model_card_is_complete_and_weights_small(level):
    from mmaudit.models.zoo.adapter import WEIGHTS

    card = model_card(level)
    for key in ("level", "parameters", "data", "seed", "accuracy", "train_seconds"):
        assert key in card
    assert card["level"] == level
    assert (WEIGHTS / f"{level}.safetensors").stat().st_size <= 5 * 1024 * 1024
