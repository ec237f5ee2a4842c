"""``random-resize-pad:LO-HI``: resize by a random factor in [LO, HI], then pad at a random place to the
largest size the factor allows (Xie et al., 2018). Random: each application draws its factor and place, so
attacks average their loss over ``--eot`` draws. Real: Pillow's bilinear resampling; stand-in: torch's, with
the same draw."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from PIL import Image

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import from_pil, span, to_pil


@transform("random-resize-pad", role="defence")
@dataclass(frozen=True)
class RandomResizePad(Transform):
    low: float = 0.9
    high: float = 1.1
    random = True

    @classmethod
    def from_arg(cls, arg: str) -> "RandomResizePad":
        return cls(*span(arg or "0.9-1.1", "LO-HI, two factors"))

    @property
    def spec(self) -> str:
        return f"random-resize-pad:{self.low:g}-{self.high:g}"

    def draw(self, h: int, w: int, rng: torch.Generator) -> tuple[int, int, int, int, int, int]:
        """(resized h, w, canvas h, w, top, left) for one application."""
        s = self.low + (self.high - self.low) * float(torch.rand((), generator=rng))
        rh, rw = max(1, round(h * s)), max(1, round(w * s))
        ch, cw = max(rh, math.ceil(h * self.high)), max(rw, math.ceil(w * self.high))
        top = int(torch.randint(0, ch - rh + 1, (), generator=rng))
        left = int(torch.randint(0, cw - rw + 1, (), generator=rng))
        return rh, rw, ch, cw, top, left

    def real(self, x, rng):
        rh, rw, ch, cw, top, left = self.draw(*x.shape[-2:], rng)
        small = from_pil(to_pil(x).resize((rw, rh), Image.BILINEAR))
        return F.pad(small, (left, cw - rw - left, top, ch - rh - top))

    def stand_in(self, x, rng):
        rh, rw, ch, cw, top, left = self.draw(*x.shape[-2:], rng)
        small = F.interpolate(x[None], size=(rh, rw), mode="bilinear", align_corners=False, antialias=True)[0]
        return F.pad(small, (left, cw - rw - left, top, ch - rh - top))
