"""L-infinity PGD in raw pixel space, written once over the VLM protocol.

A subclass defines only ``prepare`` (what is fixed before optimising) and
``objective`` (a per-sample loss to maximise), and registers itself with
``@attack(...)`` (:mod:`mmaudit.pathways.registry`); its dataclass fields are its
parameters and form its store key. The base class owns the rest:
random start, signed steps, projection, per-sample early stopping, the
downscaled-noise memory fallback and 8-bit quantisation.

Flips are decided on the *quantised* image (what a PNG holds): the result's
``adv_uint8`` is exactly what gets saved, so a reloaded image reproduces the
flip bit for bit.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM, to_image_tensor
from mmaudit.pathways.registry import key_params


@dataclass
class AttackResult:
    """Per sample: the attacked image, whether it flipped, and what it cost."""

    adv_uint8: list[np.ndarray]
    answers: list[str]
    flipped: list[bool]
    steps: list[int]
    passes: list[int]
    linf: list[float]
    flipped_at: dict[int, list[bool]] = field(default_factory=dict)  # checkpoint step -> flips so far


@dataclass
class PixelAttack:
    """Base of Vis-PGD, End-PGD and MANTIS; ``atk(vlm, samples)`` runs it on a batch."""

    name: ClassVar[str] = "pixel"
    eps: float = 8 / 255
    steps: int = 40
    alpha: float | None = None  # step size; default eps / 8 (1/255 at eps = 8/255)
    random_start: bool = True
    seed: int = 0
    early_stop: bool = True
    # early-stop checks are nearly free (teacher-forced proxy first); when they happen never changes a flip
    check_every: int = field(default=1, metadata={"key": False})
    downscale: int | None = None  # memory fallback: optimise at this side length, upsample the noise
    max_new_tokens: int = field(default=16, metadata={"key": False})
    # steps where every active sample is confirmed (one run serves many budgets)
    checkpoints: tuple[int, ...] = field(default=(), metadata={"key": "omit_empty"})
    judge: Judge = field(default_factory=Judge, metadata={"key": False})

    @classmethod
    def from_config(cls, cfg: Any, judge: Judge, max_new_tokens: int) -> PixelAttack:
        """The attack as an audit's config sets it (``cfg``: an :class:`~mmaudit.audit.config.AuditConfig`)."""
        return cls(eps=cfg.eps, steps=cfg.steps, alpha=cfg.alpha, seed=cfg.seed, early_stop=cfg.early_stop,
                   downscale=cfg.downscale, max_new_tokens=max_new_tokens, judge=judge)

    def params(self) -> dict:
        """What identifies this attack's results in the store: every field that decides them (the step size
        resolved)."""
        return key_params(self) | {"alpha": self.step_size}

    @property
    def step_size(self) -> float:
        return self.alpha if self.alpha is not None else self.eps / 8

    # -------------------------------------------------------------- subclass API
    def prepare(self, vlm: VLM, x: list[torch.Tensor], samples: list[Sample]) -> dict:
        """What is fixed before optimising; tensors are indexed and lists picked per active sample."""
        return {}

    def objective(self, vlm: VLM, x_adv: list[torch.Tensor], samples: list[Sample], ctx: dict):
        """(loss to maximise per sample, optional bool 'answer already deviates' proxy per sample); the images
        are a list, one (3, H, W) tensor per sample, of any sizes."""
        raise NotImplementedError

    # -------------------------------------------------------------- machinery
    def _start(self, samples: list[Sample], shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
        if not self.random_start or self.eps == 0:
            return [torch.zeros(shape) for shape in shapes]
        noise = []
        for s, shape in zip(samples, shapes):  # per-sample seed: a result never depends on its batch-mates
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(s.id.encode()))
            noise.append((torch.rand(shape, generator=g) * 2 - 1) * self.eps)
        return noise

    def quantise(self, x_u8: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Integer perturbation within the eps-ball and [0, 255]: what a PNG can hold."""
        bound = math.floor(self.eps * 255 + 1e-6)
        d = torch.round(delta * 255).clamp(-bound, bound)
        return (x_u8 + d).clamp(0, 255)

    def _full_delta(self, delta: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        if tuple(delta.shape[-2:]) == tuple(size):
            return delta
        return F.interpolate(delta[None], size=size, mode="bilinear", align_corners=False)[0]

    def _optimised_view(self, x: torch.Tensor) -> torch.Tensor:
        """The image the noise is optimised on: itself, or (memory fallback) a downscaled copy."""
        size = tuple(x.shape[-2:])
        if not self.downscale or max(size) <= self.downscale:
            return x
        scale = self.downscale / max(size)
        small = (max(1, round(size[0] * scale)), max(1, round(size[1] * scale)))
        return F.interpolate(x[None], size=small, mode="bilinear", align_corners=False, antialias=True)[0]

    def __call__(self, vlm: VLM, samples: list[Sample]) -> AttackResult:
        """Attack a batch whose images may differ in size: every image keeps its own float32 perturbation in raw
        pixel space (whatever the model's precision), and only its own seed, image and answers decide it."""
        x = [to_image_tensor(s.image, s.id) for s in samples]
        x_u8 = [(xi * 255).round() for xi in x]  # exact integers again: the saved PNG truncates to uint8
        sizes = [tuple(xi.shape[-2:]) for xi in x]
        x_opt = [self._optimised_view(xi) for xi in x]
        ctx = self.prepare(vlm, x_opt, samples)
        delta = [(xo + d).clamp(0, 1) - xo for xo, d in zip(x_opt, self._start(samples, [xo.shape for xo in x_opt]))]
        n = len(samples)
        active = torch.ones(n, dtype=torch.bool)
        steps = [0] * n
        passes = [0] * n
        answers: list[str | None] = [None] * n
        flipped = [False] * n
        flipped_at: dict[int, list[bool]] = {}

        def quantised(i: int) -> torch.Tensor:
            return self.quantise(x_u8[i], self._full_delta(delta[i], sizes[i]))

        def confirm(idx: list[int]) -> None:
            """Generate on the quantised full-size image; a flip is only what J says."""
            if not idx:
                return
            outs = vlm.generate([quantised(i) / 255 for i in idx], [samples[i].prompt for i in idx],
                                self.max_new_tokens)
            for i, out in zip(idx, outs):
                passes[i] += 1
                answers[i] = out
                flipped[i] = not self.judge.correct(out, samples[i])
                if flipped[i] and self.early_stop:
                    active[i] = False

        for step in range(self.steps if self.eps > 0 else 0):
            idx = torch.nonzero(active).flatten().tolist()
            if not idx:
                break
            d = [delta[i].clone().requires_grad_(True) for i in idx]
            sub = [samples[i] for i in idx]
            sub_ctx = {k: (v[idx] if isinstance(v, torch.Tensor) else [v[i] for i in idx]) for k, v in ctx.items()}
            loss, deviates = self.objective(vlm, [(x_opt[i] + di).clamp(0, 1) for i, di in zip(idx, d)], sub,
                                            sub_ctx)
            grads = torch.autograd.grad(loss.sum(), d)
            with torch.no_grad():
                for i, di, g in zip(idx, d, grads):
                    di = (di + self.step_size * g.to(di.dtype).sign()).clamp(-self.eps, self.eps)
                    delta[i] = (x_opt[i] + di).clamp(0, 1) - x_opt[i]
            for i in idx:
                steps[i] += 1
                passes[i] += 1
            if self.early_stop and ((step + 1) % self.check_every == 0):
                # The teacher-forced pass already tells which answers deviate; only those are
                # confirmed by generation (a pass that says "still correct" costs nothing).
                cand = idx if deviates is None else [i for i, dv in zip(idx, deviates.tolist()) if dv]
                if cand:
                    confirm(cand)
            if step + 1 in self.checkpoints and step + 1 < self.steps:
                # A run of step + 1 steps would end here with a full check: do the same, so its
                # flips are exactly what a separate run of that budget gives.
                confirm([i for i in idx if active[i]])
                flipped_at[step + 1] = list(flipped)
        # Final answer on the image that will be saved (stopped samples were just confirmed).
        confirm([i for i in range(n) if active[i] or answers[i] is None])
        if self.steps in self.checkpoints:
            flipped_at[self.steps] = list(flipped)
        xq = [quantised(i) for i in range(n)]
        adv = [q.permute(1, 2, 0).to(torch.uint8).numpy() for q in xq]
        linf = [float((q - xu).abs().max()) / 255 for q, xu in zip(xq, x_u8)]
        return AttackResult(adv, [a or "" for a in answers], flipped, steps, passes, linf, flipped_at)
