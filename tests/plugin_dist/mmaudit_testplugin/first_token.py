"""A pixel attack with a parameter of its own: push down the log-probability of the answer's first token, times
``weight`` (settable as --attack tp_first_token:weight=2)."""

from __future__ import annotations

from dataclasses import dataclass

from mmaudit.pathways import registry
from mmaudit.pathways.pixel.base import PixelAttack


@registry.attack("tp_first_token", display="Plugin first token", pathway="pixel", role="enhanced",
                 enhances=("end_pgd",))
@dataclass
class FirstToken(PixelAttack):
    weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weight <= 0:
            raise ValueError(f"weight must be positive, got {self.weight}")

    def objective(self, vlm, x_adv, samples, ctx):
        scores = vlm.score(x_adv, [s.prompt for s in samples], [s.answer for s in samples])
        misses = (scores.logits.argmax(-1) != scores.targets) & scores.mask
        return -self.weight * scores.token_logprobs()[:, 0], misses.any(-1).detach()
