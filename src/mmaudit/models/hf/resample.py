"""PIL's image resampling in torch: the same numbers the families' PIL processors compute, and differentiable.

Every PIL image processor in transformers resizes an 8-bit image with Pillow. Pillow resamples
separably, with per-output-pixel filter weights (the filter's support
widened by the downscale factor, normalised to sum 1, then rounded to 22-bit fixed point); each
pass rounds to the nearest 8-bit level and clamps to [0, 255] (``Resample.c``: ``precompute_coeffs``,
``normalize_coeffs_8bpc``, ``clip8``; which pass runs first depends on the release, see
:func:`vertical_first`). Here each pass is one matrix product with those same fixed-point
weights, in float64, so on an 8-bit image the result equals Pillow's exactly; the rounding and the
clamping between and after the passes are applied in the forward pass and passed straight through
in the backward pass (their gradient is the identity), so gradients reach the raw pixels.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images


def _bicubic(x: np.ndarray) -> np.ndarray:
    a = -0.5
    x = np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1, np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _bilinear(x: np.ndarray) -> np.ndarray:
    return np.clip(1 - np.abs(x), 0, None)


def _sinc(x: np.ndarray) -> np.ndarray:
    return np.sinc(x)  # numpy's is the normalised sin(pi x) / (pi x), 1 at 0, as Pillow's


def _lanczos(x: np.ndarray) -> np.ndarray:
    return np.where((x >= -3) & (x < 3), _sinc(x) * _sinc(x / 3), 0.0)


def _box(x: np.ndarray) -> np.ndarray:
    return ((x > -0.5) & (x <= 0.5)).astype(float)


def _hamming(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.sinc(x) * (float(np.float32(0.54)) + float(np.float32(0.46)) * np.cos(np.pi * x))  # 0.54f, 0.46f
    return np.where(x == 0, 1.0, np.where(x >= 1, 0.0, v))


# Pillow's resampling filters by name and by PIL.Image.Resampling value: (support, filter)
FILTERS = {"box": (0.5, _box), "bilinear": (1.0, _bilinear), "hamming": (1.0, _hamming),
           "bicubic": (2.0, _bicubic), "lanczos": (3.0, _lanczos)}
PIL_CODES = {1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def filter_name(resample) -> str:
    """'bicubic' for 'bicubic', 3 or PIL.Image.Resampling.BICUBIC (a processor's ``resample`` setting)."""
    if isinstance(resample, str):
        name = resample.lower()
    else:
        name = PIL_CODES.get(int(getattr(resample, "value", resample)), "")
    if name not in FILTERS:
        raise ValueError(f"resampling filter {resample!r} is not one Pillow resizes with ({sorted(FILTERS)})")
    return name


@lru_cache(maxsize=256)
def weights(in_size: int, out_size: int, name: str) -> np.ndarray:
    """(out_size, in_size) matrix of Pillow's fixed-point weights, as float64 (exact: k / 2**22)."""
    support, fn = FILTERS[name]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    w = np.zeros((out_size, in_size))
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        taps = fn((np.arange(xmin, xmax) - center + 0.5) / filterscale)
        total = taps.sum()
        if total != 0:
            taps = taps / total
        fixed = np.where(taps < 0, np.trunc(-0.5 + taps * (1 << PRECISION_BITS)),
                         np.trunc(0.5 + taps * (1 << PRECISION_BITS)))
        w[xx, xmin:xmax] = fixed / (1 << PRECISION_BITS)
    return w


@lru_cache(maxsize=32)
def _matrix(in_size: int, out_size: int, name: str, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(weights(in_size, out_size, name)).to(device)


def quantise8(y: torch.Tensor) -> torch.Tensor:
    """Pillow's ``clip8``: round half up to an 8-bit level, clamp to [0, 255]; identity gradient."""
    q = torch.floor(y + 0.5).clamp(0, 255)
    return y + (q - y).detach()


def snap(levels: torch.Tensor, tolerance: float = 1e-3) -> torch.Tensor:
    """8-bit images arrive as float k / 255; put them back on their exact integer levels (forward only)."""
    r = torch.round(levels)
    return levels + torch.where((r - levels).abs() < tolerance, r - levels, torch.zeros_like(levels)).detach()


def _passes(v: torch.Tensor, size: tuple[int, int], name: str, vertical_first: bool) -> torch.Tensor:
    h, w = v.shape[-2:]
    oh, ow = size

    def horizontal(x):
        return quantise8(x @ _matrix(w, ow, name, x.device).T) if ow != w else x

    def vertical(x):
        return quantise8(_matrix(h, oh, name, x.device) @ x) if oh != h else x

    return horizontal(vertical(v)) if vertical_first else vertical(horizontal(v))


@lru_cache(maxsize=1)
def pillow_reorders() -> bool:
    """Whether this Pillow runs the vertical pass first when an image loses more than twice as many rows as
    columns (Pillow 13 does; earlier releases always ran the horizontal pass first). Probed once, on a
    100 x 100 image shrunk to 80 x 20, where the two orders give different pixels."""
    from PIL import Image

    img = np.random.default_rng(0).integers(0, 256, (100, 100, 3), dtype=np.uint8)
    ref = torch.from_numpy(np.asarray(Image.fromarray(img).resize((80, 20), Image.Resampling.BICUBIC)).copy())
    v = torch.from_numpy(img).permute(2, 0, 1).double()
    return bool(torch.equal(_passes(v, (20, 80), "bicubic", True).permute(1, 2, 0).to(torch.uint8), ref))


def vertical_first(h: int, w: int, oh: int, ow: int) -> bool:
    """Pillow's pass order (measured: 396 random sizes over three filters, every one matched)."""
    return pillow_reorders() and oh < h and (h - oh) > 2 * (w - ow)


def resize_levels(v: torch.Tensor, size: tuple[int, int], resample="bicubic") -> torch.Tensor:
    """Resize (C, H, W) 8-bit levels (float64, on integers where the image is 8-bit) as Pillow does: two passes,
    each rounded to 8 bits and clamped before the next."""
    name = filter_name(resample)
    h, w = v.shape[-2:]
    oh, ow = int(size[0]), int(size[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"cannot resize to {oh} x {ow}")
    return _passes(v, (oh, ow), name, vertical_first(h, w, oh, ow))


def to_levels(x: torch.Tensor) -> torch.Tensor:
    """[0, 1] pixels -> float64 8-bit levels (snapped onto integers where they are 8-bit)."""
    return snap(x.double() * 255)


def pil_resize(x: torch.Tensor, size: tuple[int, int], resample="bicubic") -> torch.Tensor:
    """Resize (C, H, W) pixels in [0, 1] exactly as ``PIL.Image.resize`` resizes the 8-bit image; a no-op at
    the same size (Pillow copies). Returns [0, 1] pixels on 8-bit levels, in ``x``'s dtype."""
    if tuple(x.shape[-2:]) == (int(size[0]), int(size[1])):
        return x
    return (resize_levels(to_levels(x), size, resample) / 255).to(x.dtype)


def pad_square(x: torch.Tensor, background: tuple[float, ...]) -> tuple[torch.Tensor, int, int]:
    """Centre (C, H, W) on a square of its longest side filled with ``background`` (per channel, in x's units),
    as the processors' ``pad_to_square`` does; also returns the (top, left) offset of the image."""
    c, h, w = x.shape
    if h == w:
        return x, 0, 0
    side = max(h, w)
    out = torch.tensor(background, dtype=x.dtype, device=x.device).view(c, 1, 1).expand(c, side, side).clone()
    top, left = ((side - h) // 2, 0) if w > h else (0, (side - w) // 2)
    out[:, top : top + h, left : left + w] = x
    return out, top, left


def shortest_edge_size(h: int, w: int, short: int) -> tuple[int, int]:
    """transformers' ``get_resize_output_image_size`` (not square): the short side to ``short``, the long side
    scaled and truncated."""
    lo, hi = (w, h) if w <= h else (h, w)
    new_long = int(short * hi / lo)
    return (new_long, short) if w <= h else (short, new_long)


def longest_side_size(h: int, w: int, side: int, min_size: int = 1) -> tuple[int, int]:
    """The longest side to ``side``, the other scaled and rounded (DeepSeek-VL's resize), at least ``min_size``."""
    delta = side / max(h, w)
    return max(round(h * delta), min_size), max(round(w * delta), min_size)


def ceil_to(value: float, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple
