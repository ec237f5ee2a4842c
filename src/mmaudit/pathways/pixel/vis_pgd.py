"""Vis-PGD: push the vision features away from the clean image's (minimise cosine similarity)."""

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

    def prepare(self, vlm, x, samples):
        with torch.no_grad():
            return {"clean": vlm.vision_features(x).flatten(1)}

    def objective(self, vlm, x_adv, samples, ctx):
        feats = vlm.vision_features(x_adv).flatten(1)
        return -F.cosine_similarity(feats, ctx["clean"], dim=-1), None
