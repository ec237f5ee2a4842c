"""The training recipe runs for every level and resumes exactly (not trained to accuracy here)."""

import pytest
import torch

from mmaudit.models.zoo.train import Recipe, train_level


def tiny_recipe(level, steps, focus_steps=0):
    return Recipe(level=level, n_per_family=16, encoder_steps=3, steps=steps, batch=8, warmup=2,
                  focus_steps=focus_steps, focus_warmup=1, checkpoint_every=2, threads=1)


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_recipe_runs_and_l1_keeps_encoder_frozen(level, tmp_path):
    model = train_level(tiny_recipe(level, 4, focus_steps=2), tmp_path, log=lambda *_: None)
    enc = torch.load(tmp_path / f"{level}-seed0.ckpt", weights_only=False)
    assert enc["step"] == 6  # 4 QA steps + 2 focus steps
    from safetensors.torch import load_file

    pre = load_file(tmp_path / "encoder-seed0.safetensors")
    same = all(torch.equal(model.encoder.state_dict()[k], v) for k, v in pre.items())
    assert same == (level == "L1")  # L1 frozen; L2/L3 train the encoder jointly
    if level == "L3":
        assert len(model.deep) == 3


@pytest.mark.parametrize("kill_at", [2, 4, 5])  # in the QA phase, at the phase boundary, in the focus phase
def test_resume_gives_identical_weights(tmp_path, kill_at):
    recipe = tiny_recipe("L2", 4, focus_steps=3)
    full = train_level(recipe, tmp_path / "a", log=lambda *_: None)
    train_level(recipe, tmp_path / "b", log=lambda *_: None, stop_at=kill_at)  # "killed" here
    resumed = train_level(recipe, tmp_path / "b", log=lambda *_: None)
    for (k, v), (_, w) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(v, w), k
