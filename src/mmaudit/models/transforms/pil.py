"""Between (3, H, W) float tensors in [0, 1] and Pillow images: the real transforms run on what an image file
holds (8-bit RGB)."""

import numpy as np
import torch
from PIL import Image


def to_pil(x: torch.Tensor) -> Image.Image:
    return Image.fromarray((x.detach().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy())


def from_pil(im: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(im.convert("RGB"), dtype=np.float32)).permute(2, 0, 1) / 255


def positive(arg: str, what: str, cast=float, most: float | None = None):
    """``arg`` read as a positive number (at most ``most``); ValueError saying ``what`` it should be."""
    try:
        v = cast(arg)
    except ValueError:
        raise ValueError(f"{what}, got {arg!r}") from None
    if v <= 0 or (most is not None and v > most):
        raise ValueError(f"{what}, got {arg!r}")
    return v


def span(arg: str, what: str, cast=float, most: float | None = None) -> tuple:
    """``LO-HI`` (or one number, LO = HI) read as two positive numbers with LO <= HI; ValueError saying ``what``."""
    lo, sep, hi = arg.partition("-")
    low, high = positive(lo, what, cast, most), positive(hi if sep else lo, what, cast, most)
    if low > high:
        raise ValueError(f"LO-HI with LO <= HI, got {arg!r}")
    return low, high
