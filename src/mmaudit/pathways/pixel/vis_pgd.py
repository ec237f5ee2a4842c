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
        with torch.no_grad():
            return {"clean": vlm.vision_features(x, stage=self.stage).flatten(1)}

    def objective(self, vlm, x_adv, samples, ctx):
        feats = vlm.vision_features(x_adv, stage=self.stage).flatten(1)
        return -F.cosine_similarity(feats, ctx["clean"], dim=-1), None
