"""End-PGD: maximise the cross-entropy of the teacher-forced full correct answer (the paper's objective).

``loss="margin"`` optimises a margin instead: the log-likelihood of the task-matching wrong answer (fixed by the
plan, as MANTIS's) minus the clean answer's, both teacher-forced over the whole sequence; its records are keyed
by the wrong answer, and a step scores both answers (two passes).

``loss="dlr"`` is AutoAttack's untargeted difference-of-logits ratio read on every answer token, teacher-forced:
at position t with reference token y, (max over v != y of z_v - z_y) / (z_1 - z_3), z_1 >= z_2 >= z_3 the
largest logits there; the loss is its maximum over the answer's positions (greedy decoding deviates exactly when
some position's is positive). Unlike the cross-entropy it does not saturate once the answer is unlikely, and it
is invariant to how the logits are scaled. One pass a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack
from mmaudit.pathways.wrong import wrong_answer

LOSSES = ("ce", "margin", "dlr")


@attack("end_pgd", display="End-PGD", pathway="pixel", role="baseline", union_position=0, default=True,
        table_position=1, uses_wrong=lambda params: params.get("loss") == "margin")
@dataclass
class EndPGD(PixelAttack):
    loss: str = field(default="ce", metadata={"key": "omit_default"})

    # the strong preset: the cross-entropy, then AutoAttack's DLR, then the targeted margin toward the task-matching
    # wrong answer, each on what the earlier ones left; Square last, gradient-free, on the answer's log-probability.
    # Every gradient start takes two ODI steps first (Tashiro et al.'s L-inf setting): on the zoo questions a single
    # start flips by luck it raises a DLR or margin start's odds several-fold (docs/audit.md)
    OBJECTIVES = LOSSES
    STRONG = ("ce", "dlr", "margin:x2", "square:250")
    STRONG_ODI = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in LOSSES:
            raise ValueError(f"End-PGD loss must be one of {LOSSES}, got {self.loss!r}")

    @classmethod
    def config_fields(cls, cfg: Any) -> dict:
        return super().config_fields(cfg) | {"loss": cfg.end_loss}

    def objective_overrides(self, name: str) -> dict:
        return {"loss": name}

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
            logits, targets, mask = scores.logits, scores.targets, scores.mask
            loss = dlr(logits, targets, mask) if self.loss == "dlr" else -scores.sequence_logprob()
        # Greedy decoding reproduces the reference iff every teacher-forced argmax is the reference token; any
        # miss means the answer already deviates (a free proxy).
        misses = (logits.argmax(-1) != targets) & mask
        return loss, misses.any(-1).detach()


def dlr(logits, targets, mask):
    """Per sample, the largest difference-of-logits ratio over the answer's positions (logits B x T x V)."""
    z = logits.float()
    zy = z.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    other = z.scatter(-1, targets.clamp(min=0)[..., None], float("-inf")).amax(-1)
    top = z.topk(min(3, z.shape[-1]), dim=-1).values  # a vocabulary of two: z_1 - z_2
    ratio = (other - zy) / (top[..., 0] - top[..., -1] + 1e-12)
    return ratio.masked_fill(~mask, float("-inf")).amax(-1)
