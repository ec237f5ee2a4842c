"""``median:K``: a K x K median filter (Pillow's). Stand-in: the same median taken with torch over replicated
edges, whose gradient reaches the pixel each median picked."""

from dataclasses import dataclass

import torch.nn.functional as F
from PIL import ImageFilter

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import from_pil, positive, to_pil


@transform("median", role="defence")
@dataclass(frozen=True)
class Median(Transform):
    size: int = 3

    @classmethod
    def from_arg(cls, arg: str) -> "Median":
        k = positive(arg or "3", "an odd window size", int)
        if k % 2 == 0:
            raise ValueError(f"an odd window size, got {arg!r}")
        return cls(k)

    @property
    def spec(self) -> str:
        return f"median:{self.size}"

    def real(self, x, rng):
        return from_pil(to_pil(x).filter(ImageFilter.MedianFilter(self.size)))

    def stand_in(self, x, rng):
        r = self.size // 2
        c, h, w = x.shape
        patches = F.unfold(F.pad(x[None], (r, r, r, r), mode="replicate"), self.size)  # (1, C*K*K, H*W)
        return patches.view(c, self.size * self.size, h * w).median(dim=1).values.view(c, h, w)
