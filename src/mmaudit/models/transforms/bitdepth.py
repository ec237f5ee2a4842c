"""``bitdepth:B``: keep B bits of each 8-bit channel (Xu et al.'s feature squeezing). Its gradient is zero almost
everywhere: no stand-in, so attacks pass the gradient straight through (BPDA with the identity)."""

from dataclasses import dataclass

import torch

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import positive


@transform("bitdepth", role="defence")
@dataclass(frozen=True)
class BitDepth(Transform):
    bits: int = 5

    @classmethod
    def from_arg(cls, arg: str) -> "BitDepth":
        return cls(positive(arg or "5", "a bit depth from 1 to 8", int, most=8))

    @property
    def spec(self) -> str:
        return f"bitdepth:{self.bits}"

    def real(self, x, rng):
        step = 2 ** (8 - self.bits)
        return torch.floor((x * 255).round() / step) * step / 255
