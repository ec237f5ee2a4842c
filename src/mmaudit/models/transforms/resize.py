"""``resize:S`` (S <= 4: a scale factor) or ``resize:N`` (N > 4: the longest side in pixels), as front ends
shrink uploads: Pillow's bicubic resampling. Stand-in: torch's antialiased bicubic interpolation to the same
size."""

from dataclasses import dataclass

import torch.nn.functional as F
from PIL import Image

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import from_pil, positive, to_pil


@transform("resize", role="channel")
@dataclass(frozen=True)
class Resize(Transform):
    size: float = 0.5

    @classmethod
    def from_arg(cls, arg: str) -> "Resize":
        return cls(positive(arg, "a scale factor (at most 4) or a longest side in pixels"))

    @property
    def spec(self) -> str:
        return f"resize:{self.size:g}"

    def target(self, h: int, w: int) -> tuple[int, int]:
        scale = self.size if self.size <= 4 else self.size / max(h, w)
        return max(1, round(h * scale)), max(1, round(w * scale))

    def real(self, x, rng):
        h, w = self.target(*x.shape[-2:])
        return from_pil(to_pil(x).resize((w, h), Image.BICUBIC))

    def stand_in(self, x, rng):
        size = self.target(*x.shape[-2:])
        return F.interpolate(x[None], size=size, mode="bicubic", align_corners=False, antialias=True)[0].clamp(0, 1)
