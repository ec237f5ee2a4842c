"""Square attack (Andriushchenko et al., 2020), L-infinity: a random search that asks only for the loss.

It never takes a gradient, so it sees through gradient masking: when it flips what every gradient attack left,
the gradients were misleading, not the model robust (AutoAttack's check). Per sample:

* the start is vertical stripes at the ball's corners: every column of every channel shifted by +eps or -eps;
* each query changes one square window: every channel of it set to +eps or -eps (one sign per channel), the side
  ``round(sqrt(p * H * W))`` pixels (at least 1, at most the image's shorter side less one), at a uniformly drawn
  place; the candidate is kept only if the loss rises (greedy);
* ``p`` starts at ``P_INIT`` and halves at the paper's iterations 10, 50, 200, 500, 1000, 2000, 4000, 6000 and
  8000, read on a 10,000-query scale (a run of N queries halves at N/10,000 of each).

Each sample draws from its own generator, so a batch never changes a sample's result. A query is one forward
pass of the attack's objective, counted as a pass like a gradient step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

P_INIT = 0.05  # AutoAttack's Square for L-inf starts at 0.8 on 32 x 32 inputs; VLM inputs are far larger
HALVINGS = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)


def p_at(query: int, queries: int, p_init: float = P_INIT) -> float:
    """The fraction of pixels the window covers at ``query`` of ``queries``."""
    scaled = int(query / max(queries, 1) * 10_000)
    return p_init / 2 ** sum(scaled > h for h in HALVINGS)


@dataclass
class SquareState:
    generator: torch.Generator
    best_loss: float | None = None  # None: the start is not scored yet
    candidate: torch.Tensor | None = None
    queries: int = field(default=0)


class Square:
    """``propose(state, delta, project) -> candidate`` and ``settle(state, delta, loss) -> kept delta``, one
    sample at a time."""

    def __init__(self, eps: float, queries: int, p_init: float = P_INIT) -> None:
        self.eps, self.queries, self.p_init = eps, queries, p_init

    @staticmethod
    def start(shape: tuple[int, ...], eps: float, seed: int) -> torch.Tensor:
        """Vertical stripes: one random sign per channel and column."""
        g = torch.Generator().manual_seed(seed)
        c, _, w = shape
        signs = torch.randint(0, 2, (c, 1, w), generator=g).float() * 2 - 1
        return (signs * eps).expand(shape).clone()

    def state(self, seed: int) -> SquareState:
        return SquareState(torch.Generator().manual_seed(seed ^ 0x5A5A5A5A))

    def propose(self, st: SquareState, delta: torch.Tensor, project) -> torch.Tensor:
        """The image's perturbation with one window moved to a corner of the ball (the start itself first)."""
        if st.best_loss is None:
            st.candidate = delta
            return delta
        c, h, w = delta.shape
        side = int(round(math.sqrt(p_at(st.queries, self.queries, self.p_init) * h * w)))
        side = max(1, min(side, min(h, w) - 1 if min(h, w) > 1 else 1))
        cand = delta
        for _ in range(10):  # a window already at the drawn corner changes nothing: draw again
            r = int(torch.randint(0, h - side + 1, (1,), generator=st.generator))
            q = int(torch.randint(0, w - side + 1, (1,), generator=st.generator))
            signs = (torch.randint(0, 2, (c, 1, 1), generator=st.generator).float() * 2 - 1) * self.eps
            cand = delta.clone()
            cand[:, r: r + side, q: q + side] = signs
            cand = project(cand)
            if not torch.equal(cand, delta):
                break
        st.candidate = cand
        return cand

    def settle(self, st: SquareState, delta: torch.Tensor, loss: float, keep: bool = False) -> torch.Tensor:
        """The candidate if it raised the loss (or ``keep``: it already flips), else the current perturbation."""
        st.queries += 1
        if st.best_loss is None or loss > st.best_loss or keep:
            st.best_loss = loss if st.best_loss is None else max(loss, st.best_loss)
            return st.candidate
        return delta
