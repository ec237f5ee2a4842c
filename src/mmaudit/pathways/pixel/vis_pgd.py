"""Vis-PGD: push the vision encoder's features away from the clean image's (minimise cosine similarity).

The paper defines the baseline on the vision *encoder*: ``stage="encoder"`` (the
default) reads the tower's own output, before any connector / projector / Q-Former;
``stage="connector"`` attacks what the connector hands the language model instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from mmaudit.pathways.pixel.base import PixelAttack


@dataclass
class VisPGD(PixelAttack):
    name: ClassVar[str] = "vis_pgd"
    check_every: int = 5  # no teacher-forced proxy here: a check is a real generation
    stage: str = "encoder"

    def params(self) -> dict:
        return super().params() | {"stage": self.stage}

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

    def objective(self, vlm, x_adv, samples, ctx):
        feats = vlm.vision_features(x_adv, stage=self.stage)  # padded to the longest image of the batch
        return -torch.stack([F.cosine_similarity(f[: c.shape[0]].flatten(), c.flatten(), dim=0)
                             for f, c in zip(feats, ctx["clean"])]), None
