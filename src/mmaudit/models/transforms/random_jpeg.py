"""``random-jpeg:LO-HI``: JPEG re-encoding at a quality drawn per application from LO..HI (whole numbers), the
randomised JPEG defence of SHIELD (Das et al., 2018), without its per-block mixing. Random: attacks average their
loss over ``--eot`` draws. Real and stand-in: :mod:`~mmaudit.models.transforms.jpeg`'s, at the drawn quality."""

from dataclasses import dataclass

import torch

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.jpeg import JPEG
from mmaudit.models.transforms.pil import span


@transform("random-jpeg", role="defence")
@dataclass(frozen=True)
class RandomJPEG(Transform):
    low: int = 50
    high: int = 90
    random = True

    @classmethod
    def from_arg(cls, arg: str) -> "RandomJPEG":
        return cls(*span(arg or "50-90", "LO-HI, two qualities from 1 to 100", int, most=100))

    @property
    def spec(self) -> str:
        return f"random-jpeg:{self.low}-{self.high}"

    def draw(self, rng: torch.Generator) -> JPEG:
        return JPEG(int(torch.randint(self.low, self.high + 1, (), generator=rng)))

    def real(self, x, rng):
        return self.draw(rng).real(x, rng)

    def stand_in(self, x, rng):
        return self.draw(rng).stand_in(x, rng)
