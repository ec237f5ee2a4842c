"""End-PGD: maximise the cross-entropy of the teacher-forced full correct answer (the paper's objective).

``loss="margin"`` optimises a margin instead: the log-likelihood of the task-matching wrong answer (fixed by the
plan, as MANTIS's) minus the clean answer's, both teacher-forced over the whole sequence; its records are keyed
by the wrong answer, and a step scores both answers (two passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack
from mmaudit.pathways.wrong import wrong_answer

LOSSES = ("ce", "margin")


@attack("end_pgd", display="End-PGD", pathway="pixel", role="baseline", union_position=0, default=True,
        table_position=1, uses_wrong=lambda params: params.get("loss") == "margin")
@dataclass
class EndPGD(PixelAttack):
    loss: str = field(default="ce", metadata={"key": "omit_default"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in LOSSES:
            raise ValueError(f"End-PGD loss must be one of {LOSSES}, got {self.loss!r}")

    @classmethod
    def config_fields(cls, cfg: Any) -> dict:
        return super().config_fields(cfg) | {"loss": cfg.end_loss}

    @property
    def passes_per_step(self) -> int:
        return 2 if self.loss == "margin" else 1

    def prepare(self, vlm, x, samples):
        return {"wrong": [wrong_answer(s, self.judge) for s in samples]} if self.loss == "margin" else {}

    def objective(self, vlm, x_adv, samples, ctx):
        prompts, answers = [s.prompt for s in samples], [s.answer for s in samples]
        if self.loss == "margin":  # both answers in one batch: the clean half gives the proxy
            scores = vlm.score(x_adv + x_adv, prompts + prompts, answers + ctx["wrong"])
            lp = scores.sequence_logprob()
            n = len(samples)
            loss, logits, targets, mask = lp[n:] - lp[:n], scores.logits[:n], scores.targets[:n], scores.mask[:n]
        else:
            scores = vlm.score(x_adv, prompts, answers)
            loss, logits, targets, mask = -scores.sequence_logprob(), scores.logits, scores.targets, scores.mask
        # Greedy decoding reproduces the reference iff every teacher-forced argmax is the reference token; any
        # miss means the answer already deviates (a free proxy).
        misses = (logits.argmax(-1) != targets) & mask
        return loss, misses.any(-1).detach()
