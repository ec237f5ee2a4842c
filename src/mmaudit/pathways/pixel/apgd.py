"""APGD (Croce & Hein, 2020), the step-size-free PGD AutoAttack and RobustVLM use, for one sample at a time.

Each sample keeps its own state, so a batch never changes a sample's result:

* step size ``eta`` starts at 2 eps; steps are signed-gradient steps with momentum 0.75 (the first has none):
  z = P(x + eta sign(g)), x' = P(x + 0.75 (z - x) + 0.25 (x - x_prev)), P the projection on the eps-ball and
  the image range;
* checkpoints: the first after 22% of the iterations, then intervals shrinking by 3% of the iterations, never
  below 6%;
* at a checkpoint the step size is halved, and the sample restarts from the best point seen (with its
  gradient), when fewer than rho = 75% of the steps since the last checkpoint raised the loss, or when the best
  loss did not improve since the last checkpoint and the step size was not halved there (the reference code's
  "reduce, no improvement" rule; AutoAttack's code counts "at most 75%", the paper "fewer than": the paper's);
* the attack ends on the best point (highest loss) unless it flipped earlier.

An iteration is one forward and backward pass; the first evaluates the starting point, so ``steps`` iterations
cost the same passes as ``steps`` PGD steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

MOMENTUM = 0.75
RHO = 0.75


def schedule(steps: int) -> tuple[int, int, int]:
    """(first checkpoint interval, its shrink per checkpoint, its minimum), in iterations."""
    return max(int(0.22 * steps), 1), max(int(0.03 * steps), 1), max(int(0.06 * steps), 1)


@dataclass
class APGDState:
    eta: float
    interval: int
    prev: torch.Tensor | None = None
    best: torch.Tensor | None = None
    best_grad: torch.Tensor | None = None
    best_loss: float = float("-inf")
    last_loss: float = float("-inf")
    best_at_check: float = float("-inf")
    increases: int = 0
    since: int = 0
    reduced_last: bool = True  # as the reference code starts: no "no improvement" halving at the first checkpoint
    halvings: int = 0


class APGD:
    """``update(state, x, grad, loss, project) -> next x`` for one sample; ``project`` maps a perturbation back
    into the eps-ball and the image range."""

    def __init__(self, eps: float, steps: int) -> None:
        self.eps = eps
        self.first, self.shrink, self.minimum = schedule(steps)

    def start(self) -> APGDState:
        return APGDState(eta=2 * self.eps, interval=self.first)

    def update(self, st: APGDState, x: torch.Tensor, grad: torch.Tensor, loss: float,
               project: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if st.best is None:  # the starting point: no momentum on the first step
            st.best, st.best_grad, st.best_loss, st.best_at_check, st.last_loss = x, grad, loss, loss, loss
            st.prev, momentum = x, 1.0
        else:
            st.increases += loss > st.last_loss
            st.last_loss = loss
            if loss > st.best_loss:
                st.best, st.best_grad, st.best_loss = x, grad, loss
            st.since += 1
            if st.since == st.interval:
                reduce = st.increases < RHO * st.interval or (not st.reduced_last and st.best_at_check >= st.best_loss)
                st.reduced_last, st.best_at_check = reduce, st.best_loss
                if reduce:
                    st.eta /= 2
                    st.halvings += 1
                    x, grad = st.best, st.best_grad
                st.interval = max(st.interval - self.shrink, self.minimum)
                st.since = st.increases = 0
            momentum = MOMENTUM
        z = project(x + st.eta * grad.sign())
        nxt = project(x + momentum * (z - x) + (1 - momentum) * (x - st.prev))
        st.prev = x
        return nxt
