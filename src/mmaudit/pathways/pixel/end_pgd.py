"""End-PGD: maximise the cross-entropy of the teacher-forced full correct answer."""

from __future__ import annotations

from dataclasses import dataclass

from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack


@attack("end_pgd", display="End-PGD", pathway="pixel", role="baseline", union_position=0, default=True,
        table_position=1)
@dataclass
class EndPGD(PixelAttack):

    def objective(self, vlm, x_adv, samples, ctx):
        scores = vlm.score(x_adv, [s.prompt for s in samples], [s.answer for s in samples])
        # Greedy decoding reproduces the reference iff every teacher-forced argmax is the
        # reference token; any miss means the answer already deviates (a free proxy).
        misses = (scores.logits.argmax(-1) != scores.targets) & scores.mask
        return -scores.sequence_logprob(), misses.any(-1).detach()
