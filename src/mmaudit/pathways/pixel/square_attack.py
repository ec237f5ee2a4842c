"""Square on its own: the gradient-free pixel attack, for white-box models and for black-box endpoints alike.

On a white-box model it is End-PGD's objective searched by Square (:mod:`mmaudit.pathways.pixel.square`),
scored through ``score``. On a deployed model behind an OpenAI-compatible endpoint it needs only what such an
endpoint returns: each query is one request at temperature 0 asking for the reply's token log-probabilities,
and the loss is minus the reply's log-likelihood while the reply is still right (a reply the judge calls wrong is
a flip, and the search stops there). Its cost is counted in requests (the records' ``passes``) and bounded by
``--budget``; every request is cached in the run folder, so a run stopped by the budget resumes for free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmaudit.errors import UsageError
from mmaudit.models.blackbox import failed
from mmaudit.models.vlm import VLM, to_image_tensor
from mmaudit.pathways.pixel.base import SQUARE_QUERIES, AttackResult, saved
from mmaudit.pathways.pixel.end_pgd import EndPGD
from mmaudit.pathways.pixel.square import Square
from mmaudit.pathways.registry import attack


@attack("square", display="Square", pathway="pixel", role="baseline", black_box=True)
@dataclass
class SquareAttack(EndPGD):
    steps: int = SQUARE_QUERIES  # queries per sample
    optimiser: str = field(default="square", metadata={"key": "omit_default"})

    OBJECTIVES = ("ce",)
    STRONG = ()  # it is the gradient-free check itself

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.optimiser != "square":
            raise ValueError(f"Square searches without gradients: optimiser must be square, got {self.optimiser!r}")

    @classmethod
    def config_fields(cls, cfg: Any) -> dict:
        """Its budget is its own (``--attack square:steps=N``), not the gradient attacks' ``--steps``."""
        return {"eps": cfg.eps, "seed": cfg.seed, "early_stop": cfg.early_stop, "downscale": cfg.downscale}

    def __call__(self, vlm, samples) -> AttackResult:
        if isinstance(vlm, VLM):
            return super().__call__(vlm, samples)
        if self.loss != "ce":
            raise UsageError(f"Square on a black-box target reads the reply's log-likelihood: loss ce, not "
                             f"{self.loss!r}")
        return self._black_box(vlm, samples)

    def _black_box(self, target, samples) -> AttackResult:
        """Square through an endpoint: one request per active sample and query, each reply judged at once."""
        n = len(samples)
        x_u8 = [(to_image_tensor(s.image, s.id) * 255).round() for s in samples]
        x = [xu / 255 for xu in x_u8]
        start = self._start(samples, [xi.shape for xi in x])
        delta = [(xi + d).clamp(0, 1) - xi for xi, d in zip(x, start)]
        square = Square(self.eps, self.steps)
        states = [square.state(self.sample_seed(s, 0)) for s in samples]
        passes, answers, flipped = [0] * n, [""] * n, [False] * n
        active = list(range(n))
        for _ in range(self.steps if self.eps > 0 else 0):
            if not active:
                break
            cands = [square.propose(states[i], delta[i], lambda v, i=i: (x[i] + v.clamp(-self.eps, self.eps))
                                    .clamp(0, 1) - x[i]) for i in active]
            images = [self.quantise(x_u8[i], c) / 255 for i, c in zip(active, cands)]
            replies = target.generate_scored(images, [samples[i].prompt for i in active], self.max_new_tokens)
            still = []
            for i, c, (reply, lp) in zip(active, cands, replies):
                passes[i] += 1
                if failed(reply):  # the endpoint gave no answer for good: the sample stops, unflipped
                    answers[i] = reply
                    continue
                if lp is None:
                    raise UsageError(f"{getattr(target, 'name', 'the endpoint')} returns no token log-probabilities "
                                     f"(sample {samples[i].id}): Square needs them (OpenAI's logprobs=true)")
                wrong = not self.judge.correct(reply, samples[i])
                kept = square.settle(states[i], delta[i], -lp, keep=wrong)
                if kept is c:
                    answers[i] = reply  # the kept image's reply
                delta[i] = kept
                if wrong:  # every query is a full answer: a flip ends the search
                    flipped[i] = True
                else:
                    still.append(i)
            active = still
        adv, linf = saved([self.quantise(xu, d) for xu, d in zip(x_u8, delta)], x_u8)
        return AttackResult(adv, answers, flipped, list(passes), passes, linf, {}, [0] * n)
