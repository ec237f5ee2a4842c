"""``noise:SIGMA``: Gaussian noise of standard deviation SIGMA (in 0-255 pixel units) added to every pixel before
the encoder, as randomised-smoothing deployments do (Cohen et al., 2019), clipped to the valid range. Random: each
application draws new noise, so attacks average their loss over ``--eot`` draws. The stand-in is the same sum
(differentiable as it is), with the same draw."""

from dataclasses import dataclass

import torch

from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import positive


@transform("noise", role="defence")
@dataclass(frozen=True)
class Noise(Transform):
    sigma: float = 8.0
    random = True

    @classmethod
    def from_arg(cls, arg: str) -> "Noise":
        return cls(positive(arg or "8", "a standard deviation in pixel units (0-255)", most=255))

    @property
    def spec(self) -> str:
        return f"noise:{self.sigma:g}"

    def real(self, x, rng):
        return self.stand_in(x, rng)

    def stand_in(self, x, rng):
        return (x + torch.randn(x.shape, generator=rng, dtype=x.dtype) * (self.sigma / 255)).clamp(0, 1)
