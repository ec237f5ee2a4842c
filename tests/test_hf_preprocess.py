import numpy as np
import torch


def test_qwen_preprocessing_equals_family_processor(tiny_qwen):
    rng = np.random.default_rng(0)
    for h, w in [(56, 84), (112, 56)]:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        ref = tiny_qwen.image_processor(images=[img], return_tensors="pt")
        x = torch.from_numpy(img).permute(2, 0, 1).float() / 255
        ours, grids = tiny_qwen.preprocess([x])
        assert torch.equal(ours["image_grid_thw"], ref["image_grid_thw"])
        assert torch.allclose(ours["pixel_values"], ref["pixel_values"], atol=1e-5)
        assert (grids[0].rows, grids[0].cols) == (h // 28, w // 28)


def test_saved_tiny_checkpoint_loads_offline(tmp_path):
    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.tiny import save_tiny_qwen2_5_vl

    path = save_tiny_qwen2_5_vl(tmp_path / "tiny")
    vlm = load_hf(path, level="L2", dtype="float32")
    x = torch.rand(1, 3, 56, 56)
    assert isinstance(vlm.generate(x, ["what ?"], max_new_tokens=3)[0], str)
