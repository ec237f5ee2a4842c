import numpy as np
import pytest
import torch


@pytest.mark.parametrize("fixture", ["tiny_qwen", "tiny_qwen2", "tiny_qwen3", "tiny_qwen35"])
def test_qwen_preprocessing_equals_family_processor(fixture, request):
    vlm = request.getfixturevalue(fixture)
    f = vlm.patch * vlm.merge  # 28 for Qwen2/2.5-VL, 32 for Qwen3-VL/3.5
    rng = np.random.default_rng(0)
    for h, w in [(2 * f, 3 * f), (4 * f, 2 * f)]:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        ref = vlm.image_processor(images=[img], return_tensors="pt")
        x = torch.from_numpy(img).permute(2, 0, 1).float() / 255
        ours, grids = vlm.preprocess([x])
        assert torch.equal(ours["image_grid_thw"], ref["image_grid_thw"])
        assert torch.allclose(ours["pixel_values"], ref["pixel_values"], atol=1e-5)
        assert (grids[0].rows, grids[0].cols) == (h // f, w // f)


def test_saved_tiny_checkpoint_loads_offline(tmp_path):
    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.tiny import save_tiny

    path = save_tiny(tmp_path / "tiny")
    vlm = load_hf(path, level="L2", dtype="float32")
    x = torch.rand(1, 3, 56, 56)
    assert isinstance(vlm.generate(x, ["what ?"], max_new_tokens=3)[0], str)


def test_audit_runs_end_to_end_on_a_saved_tiny_qwen2_vl(tmp_path):
    import json

    from typer.testing import CliRunner

    from mmaudit.cli import app
    from mmaudit.models.hf.tiny import save_tiny

    path = save_tiny(tmp_path / "tiny2", "qwen2_vl")
    res = CliRunner().invoke(app, ["audit", "--model", f"{path}@L2", "--data", "synthetic:2", "--steps", "2",
                                   "--n-boot", "50", "--ocr-limit", "0", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["models"][0]["level"] == "L2" and summary["models"][0]["n"] == 6


@pytest.mark.parametrize("fixture,side,grid", [("tiny_gemma3", 56, 2), ("tiny_blip2", 28, 2),
                                                  ("tiny_instructblip", 28, 2)])
def test_square_resize_families_equal_their_processor(fixture, side, grid, request):
    vlm = request.getfixturevalue(fixture)
    img = np.random.default_rng(1).integers(0, 256, size=(side, side, 3), dtype=np.uint8)
    ref = vlm.image_processor(images=[img], return_tensors="pt")["pixel_values"]
    ours, grids = vlm.preprocess([torch.from_numpy(img).permute(2, 0, 1).float() / 255])
    assert torch.allclose(ours["pixel_values"], ref, atol=1e-6) and (grids[0].rows, grids[0].cols) == (grid, grid)


def test_smolvlm_tiles_equal_the_family_processor(tiny_smolvlm):
    img = np.random.default_rng(2).integers(0, 256, size=(56, 56, 3), dtype=np.uint8)
    ref = tiny_smolvlm.image_processor(images=[[img]], return_tensors="pt")["pixel_values"]
    ours, grids = tiny_smolvlm.preprocess([torch.from_numpy(img).permute(2, 0, 1).float() / 255])
    assert ours["pixel_values"].shape == ref.shape == (1, 5, 3, 28, 28)  # 2 x 2 tiles + the global view
    assert torch.allclose(ours["pixel_values"], ref, atol=1e-6)  # tiles and the Lanczos global view: exact
    g = grids[0]
    assert g.n_tokens == 5 and g.region_to_patches((30, 30, 40, 40)) == [3, 4]


@pytest.mark.parametrize("device_map", [{"": "cpu"}, "auto"])
def test_bf16_and_device_map_load(tmp_path, device_map):
    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.tiny import save_tiny

    vlm = load_hf(save_tiny(tmp_path / "tiny"), level="L2", dtype="bfloat16", device_map=device_map)
    assert next(vlm.model.parameters()).dtype == torch.bfloat16 and vlm.device.type == "cpu"
    x = torch.rand(1, 3, 56, 56, requires_grad=True)
    vlm.score(x, ["what ?"], ["1"]).sequence_logprob().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
