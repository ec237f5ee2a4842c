"""Qwen-VL's image preprocessing settings: the release resizes every image to the tower's square size with Pillow's
bicubic filter (aspect not kept) and normalises with CLIP's mean and std (its ``image_transform``); it ships no
processor file, so the settings come from ``config.json``'s ``visual`` block."""

from __future__ import annotations

import json
from pathlib import Path

from mmaudit.models.hf.families import CLIP_NORM


class QWenVLImageProcessor:
    """The settings, and (``__call__``) the release's transform on 8-bit images with Pillow and numpy: the reference
    the adapter's differentiable torch preprocessing is held to."""

    def __init__(self, image_size: int = 448, image_mean=None, image_std=None, resample: int = 3) -> None:
        self.image_size, self.resample = image_size, resample  # 3: Pillow's BICUBIC, the release's filter
        self.image_mean = list(image_mean or CLIP_NORM["image_mean"])
        self.image_std = list(image_std or CLIP_NORM["image_std"])

    def __call__(self, images, return_tensors: str = "pt") -> dict:
        import numpy as np
        import torch
        from PIL import Image

        out = []
        for im in images:
            small = Image.fromarray(np.asarray(im)).convert("RGB").resize((self.image_size,) * 2, self.resample)
            x = np.asarray(small, dtype=np.float32) / 255
            out.append((x - np.array(self.image_mean, np.float32)) / np.array(self.image_std, np.float32))
        return {"pixel_values": torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)}

    @classmethod
    def from_pretrained(cls, path: str | Path) -> QWenVLImageProcessor:
        from transformers.utils import cached_file

        found = cached_file(str(path), "config.json")
        return cls(int(json.loads(Path(found).read_text())["visual"]["image_size"]))

    def save_pretrained(self, path: str | Path) -> None:
        """Nothing to write: the release keeps these settings in config.json."""
