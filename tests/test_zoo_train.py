"""The training recipe runs for every level and resumes exactly (not trained to accuracy here)."""

import pytest
import torch

from mmaudit.models.zoo.train import Recipe, train_level


def tiny_recipe(level, steps):
    return Recipe(level=level, n_per_family=16, encoder_steps=3, steps=steps, batch=8, warmup=2,
                  checkpoint_every=2, threads=1)


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_recipe_runs_and_l1_keeps_encoder_frozen(level, tmp_path):
    model = train_level(tiny_recipe(level, 4), tmp_path, log=lambda *_: None)
    enc = torch.load(tmp_path / f"{level}-seed0.ckpt", weights_only=False)
    assert enc["step"] == 4
    from safetensors.torch import load_file

    pre = load_file(tmp_path / "encoder-seed0.safetensors")
    same = all(torch.equal(model.encoder.state_dict()[k], v) for k, v in pre.items())
    assert same == (level == "L1")  # L1 frozen; L2/L3 train the encoder jointly
    if level == "L3":
        assert len(model.deep) == 3


def test_resume_gives_identical_weights(tmp_path):
    full = train_level(tiny_recipe("L2", 4), tmp_path / "a", log=lambda *_: None)
    train_level(tiny_recipe("L2", 4), tmp_path / "b", log=lambda *_: None, stop_at=2)  # "killed" at step 2
    resumed = train_level(tiny_recipe("L2", 4), tmp_path / "b", log=lambda *_: None)
    for (k, v), (_, w) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(v, w), k
