"""``blur:SIGMA``: a Gaussian blur of standard deviation SIGMA pixels (Pillow's GaussianBlur). Stand-in: a
separable Gaussian convolution in torch, 3 SIGMA each side, replicated edges."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from PIL import ImageFilter

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import from_pil, positive, to_pil


@transform("blur", role="defence")
@dataclass(frozen=True)
class Blur(Transform):
    sigma: float = 1.0

    @classmethod
    def from_arg(cls, arg: str) -> "Blur":
        return cls(positive(arg or "1", "a standard deviation in pixels"))

    @property
    def spec(self) -> str:
        return f"blur:{self.sigma:g}"

    def real(self, x, rng):
        return from_pil(to_pil(x).filter(ImageFilter.GaussianBlur(self.sigma)))

    def stand_in(self, x, rng):
        r = max(1, math.ceil(3 * self.sigma))
        t = torch.arange(-r, r + 1, dtype=x.dtype)
        k = torch.exp(-(t**2) / (2 * self.sigma**2))
        k = k / k.sum()
        c = x.shape[0]
        y = F.pad(x[None], (r, r, r, r), mode="replicate")
        y = F.conv2d(y, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
        y = F.conv2d(y, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
        return y[0]
