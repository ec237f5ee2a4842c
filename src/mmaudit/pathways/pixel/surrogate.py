"""Surrogate-ensemble transfer: images made to transfer, with no gradient (and no query) of the target.

After M-Attack (2025) and FOA-Attack: every step takes a random local crop of the adversarial image (a fraction
``crop_scale`` of its area, aspect ratio in [3/4, 4/3], placed at random, as RandomResizedCrop draws it),
embeds it with each surrogate image encoder (resized to the encoder's input as its processor would) and raises
its mean cosine similarity to the embedding of a target image; signed steps of ``alpha`` inside the eps-ball.
The target image of a question is its Typo-Evid image (the plan's task-matching wrong answer rendered on the
clean image; ``target`` may name another rendered-text attack, such as Nat-Evid), so the perturbation carries the
rendered-text pathway into pixel space within eps. Crops are drawn
from each sample's own seeded generator, so a sample's image never depends on its batch-mates.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mmaudit.models.encoders import Ensemble
from mmaudit.models.vlm import to_image_tensor
from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack
from mmaudit.pathways.text.base import TextAttack
from mmaudit.pathways.text.typo_evid import TypoEvid


def random_crop(image: torch.Tensor, scale: tuple[float, float], g: torch.Generator) -> torch.Tensor:
    """A RandomResizedCrop-style box of ``image`` (3, H, W): area fraction in ``scale``, log-uniform aspect ratio
    in [3/4, 4/3], uniform position (the full image when no box fits in ten draws)."""
    h, w = image.shape[-2:]
    for _ in range(10):
        area = h * w * (scale[0] + (scale[1] - scale[0]) * float(torch.rand(1, generator=g)))
        ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * float(torch.rand(1, generator=g)))
        cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (1,), generator=g))
            left = int(torch.randint(0, w - cw + 1, (1,), generator=g))
            return image[:, top : top + ch, left : left + cw]
    return image


@attack("surrogate", display="Surrogate ensemble", pathway="pixel", role="baseline", uses_wrong=True,
        transfer_only=True)
@dataclass
class SurrogateEnsemble(PixelAttack):
    eps: float = 16 / 255
    steps: int = 300
    alpha: float | None = 1 / 255
    random_start: bool = False
    early_stop: bool = False  # a transfer attack never asks its target
    crop_scale: tuple[float, float] = (0.5, 0.9)
    ensemble: Ensemble = field(default_factory=lambda: Ensemble(()), metadata={"key": "nested"})
    # the edit whose image each question's perturbation is matched to (the paper's Typo-Evid by default)
    target: TextAttack = field(default_factory=TypoEvid, metadata={"key": "nested"})

    def prepare(self, vlm, x, samples):
        """Each question's target embedding per surrogate (its Typo-Evid image), and its crop generator."""
        if not self.ensemble.members:
            raise ValueError("a surrogate-ensemble attack needs at least one surrogate encoder")
        targets = [to_image_tensor(self.target(s).image, s.id) for s in samples]
        ctx = {"rng": [torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:crop:{s.id}".encode()))
                       for s in samples]}
        with torch.no_grad():
            for k, enc in enumerate(self.ensemble.members):
                ctx[f"target{k}"] = F.normalize(enc.embed([t.to(enc.device) for t in targets]), dim=-1).cpu()
        return ctx

    def objective(self, vlm, x_adv, samples, ctx):
        crops = [random_crop(x, self.crop_scale, g) for x, g in zip(x_adv, ctx["rng"])]
        sims = []
        for k, enc in enumerate(self.ensemble.members):
            emb = F.normalize(enc.embed([c.to(enc.device) for c in crops]), dim=-1)
            sims.append((emb * ctx[f"target{k}"].to(emb.device)).sum(-1).cpu())
        return torch.stack(sims).mean(0), None
