"""Vis-PGD: push the vision encoder's features away from the clean image's (minimise cosine similarity).

The paper defines the baseline on the vision *encoder*: ``stage="encoder"`` (the
default) reads the tower's own output, before any connector / projector / Q-Former;
``stage="connector"`` attacks what the connector hands the language model instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack


@attack("vis_pgd", display="Vis-PGD", pathway="pixel", role="baseline", union_position=1, default=True,
        table_position=0)
@dataclass
class VisPGD(PixelAttack):
    # No teacher-forced proxy here: a check is a real generation. Under PGD every 5th step's image is checked; an
    # APGD step moves the image far (its step size starts at 2 eps), so every step's image is (each check is a
    # counted pass); a Square query moves one small window, so every 25th is. The encoder objective saturates well
    # before it flips an answer (the paper's target mismatch), so which images along the path are checked, not the
    # loss reached, decides most of its flips.
    check_every: int | None = field(default=None, metadata={"key": False})
    stage: str = "encoder"

    OBJECTIVES = ("cosine",)
    STRONG = ("cosine:x3", "square:250")  # each random start is another draw (docs/audit.md)

    @property
    def check_interval(self) -> int:
        return self.check_every or {"apgd": 1, "pgd": 5}.get(self.optimiser, 25)

    def prepare(self, vlm, x, samples):
        """Each image's clean features, unpadded (images of one size are encoded together)."""
        groups: dict[tuple, list[int]] = {}
        for k, xi in enumerate(x):
            groups.setdefault(tuple(xi.shape), []).append(k)
        clean: list = [None] * len(x)
        with torch.no_grad():
            for members in groups.values():
                feats = vlm.vision_features([x[k] for k in members], stage=self.stage)
                for k, f in zip(members, feats):
                    clean[k] = f
        return {"clean": clean}

    def outputs(self, vlm, x_adv, samples, ctx):
        """ODI's outputs here are the encoder's features, what this attack pushes on (it never reads an answer)."""
        feats = vlm.vision_features(x_adv, stage=self.stage)
        return [f[: c.shape[0]].float() for f, c in zip(feats, ctx["clean"])]

    def objective(self, vlm, x_adv, samples, ctx):
        feats = vlm.vision_features(x_adv, stage=self.stage)  # padded to the longest image of the batch
        return -torch.stack([F.cosine_similarity(f[: c.shape[0]].flatten(), c.flatten(), dim=0)
                             for f, c in zip(feats, ctx["clean"])]), None
