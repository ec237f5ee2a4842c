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
    # no teacher-forced proxy here: a check is a real generation
    check_every: int = field(default=5, metadata={"key": False})
    stage: str = "encoder"

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
