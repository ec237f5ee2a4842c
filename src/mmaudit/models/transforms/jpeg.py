"""``jpeg:Q``: JPEG re-encoding at quality Q, as chat front ends and APIs do to uploads (Pillow's encoder,
4:2:0 chroma subsampling, its default). Stand-in: kornia's differentiable JPEG (the same quantisation tables and
subsampling, rounding made smooth); within 1/255 of Pillow on average on natural images
(tests/test_channels.py states the tolerance)."""

from dataclasses import dataclass
from io import BytesIO

import torch
from PIL import Image

from mmaudit.errors import UsageError
from mmaudit.models.transforms import Transform, transform
from mmaudit.models.transforms.pil import from_pil, positive, to_pil


@transform("jpeg", role="channel")
@dataclass(frozen=True)
class JPEG(Transform):
    quality: int = 75

    @classmethod
    def from_arg(cls, arg: str) -> "JPEG":
        return cls(positive(arg or "75", "a quality from 1 to 100", int, most=100))

    @property
    def spec(self) -> str:
        return f"jpeg:{self.quality}"

    def real(self, x, rng):
        buf = BytesIO()
        to_pil(x).save(buf, format="JPEG", quality=self.quality)
        with Image.open(buf) as im:
            return from_pil(im)

    def stand_in(self, x, rng):
        try:
            from kornia.enhance import jpeg_codec_differentiable
        except ImportError:
            raise UsageError("jpeg's differentiable stand-in needs kornia: pip install 'mmaudit[channels]'") from None
        h, w = x.shape[-2:]
        ph, pw = -h % 16, -w % 16  # kornia codes whole 16 x 16 blocks: pad by replication, cut back after
        xp = torch.nn.functional.pad(x[None], (0, pw, 0, ph), mode="replicate")
        out = jpeg_codec_differentiable(xp, torch.tensor([float(self.quality)], dtype=x.dtype))
        return out[0, :, :h, :w].clamp(0, 1)
