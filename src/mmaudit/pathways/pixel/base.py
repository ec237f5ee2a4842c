"""L-infinity PGD and APGD in raw pixel space, written once over the VLM protocol.

A subclass defines only ``prepare`` (what is fixed before optimising) and
``objective`` (a per-sample loss to maximise), and registers itself with
``@attack(...)`` (:mod:`mmaudit.pathways.registry`); its dataclass fields are its
parameters and form its store key. The base class owns the rest: random start,
the step rule (``optimiser``: signed-gradient PGD, or APGD with its step-size
schedule, :mod:`mmaudit.pathways.pixel.apgd`), projection, per-sample early
stopping, restarts (the per-sample worst case: a sample flipped by any restart
is flipped; later restarts start at random and run only on what earlier ones
left), the downscaled-noise memory fallback and 8-bit quantisation.

Flips are decided on the *quantised* image (what a PNG holds): the result's
``adv_uint8`` is exactly what gets saved, so a reloaded image reproduces the
flip bit for bit. :meth:`PixelAttack.craft` runs the same optimisation without
a target model (a transfer attack's surrogates), deciding nothing.

``members`` runs the attack AutoAttack's way (the strong preset): its members in
order, each only on what earlier ones left unflipped, the per-sample worst case
kept. A member is one of the attack's objectives (``OBJECTIVES``: End-PGD's ``ce``,
``dlr`` and targeted ``margin``) or ``square``, the gradient-free Square search on
the attack's own objective (:mod:`mmaudit.pathways.pixel.square`);
``NAME:[STEPS][xRESTARTS]`` gives a member its own budget. ``odi`` starts every gradient run (each restart,
each member) with output-diversified initialisation: a few signed steps along a random direction of the model's
outputs, so restarts explore (End-PGD's strong preset takes 2).
"""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM, to_image_tensor
from mmaudit.pathways.pixel.apgd import APGD
from mmaudit.pathways.pixel.square import Square
from mmaudit.pathways.registry import key_params

SQUARE_QUERIES = 400  # a square member's queries unless it names its own
ODI_STREAM = 0x0D1  # mixed into a start's seed for its ODI direction (its random start keeps the seed itself)
OPTIMISERS = ("pgd", "apgd", "square")  # square: gradient-free, an ensemble's last member


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
    restart: list[int] = field(default_factory=list)  # the restart whose image was kept (it flipped, or the last)
    # an ensemble's: the member whose image was kept, and each member's passes per sample (members it reached)
    member: list[str] = field(default_factory=list)
    member_passes: list[dict[str, int]] = field(default_factory=list)

    @staticmethod
    def merged(parts: list[tuple[list[int], AttackResult]], n: int, members: list[str] | None = None) -> AttackResult:
        """Per-sample results of several runs over subsets (index lists) of n samples: the later run wins.
        ``members`` names each part's ensemble member (the result then says who flipped what, at what cost)."""
        out = AttackResult([None] * n, [""] * n, [False] * n, [0] * n, [0] * n, [0.0] * n, {}, [0] * n)
        if members:
            out.member, out.member_passes = [""] * n, [{} for _ in range(n)]
        for k, (idx, res) in enumerate(parts):
            for j, i in enumerate(idx):
                out.adv_uint8[i], out.answers[i], out.flipped[i] = res.adv_uint8[j], res.answers[j], res.flipped[j]
                out.steps[i] += res.steps[j]
                out.passes[i] += res.passes[j]
                out.linf[i], out.restart[i] = res.linf[j], res.restart[j]
                if members:
                    out.member[i] = members[k]
                    out.member_passes[i][members[k]] = res.passes[j]
        return out


def saved(xq: list[torch.Tensor], x_u8: list[torch.Tensor]) -> tuple[list[np.ndarray], list[float]]:
    """The quantised images as the PNGs will hold them (H, W, 3 uint8), and each one's L-inf distance."""
    return ([q.permute(1, 2, 0).to(torch.uint8).numpy() for q in xq],
            [float((q - xu).abs().max()) / 255 for q, xu in zip(xq, x_u8)])


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
    optimiser: str = field(default="pgd", metadata={"key": "omit_default"})  # pgd | apgd
    restarts: int = field(default=1, metadata={"key": "omit_default"})  # runs per sample (worst case kept)
    # APGD's step-size schedule laid out for this many steps, of which ``steps`` are taken: a shorter run that is
    # exactly the first ``steps`` of the longer one (its large early steps, where flips happen; docs/audit.md)
    schedule: int | None = field(default=None, metadata={"key": "omit_default"})
    # members run in order on what earlier ones left ("ce", "margin:50x2", "square:300"); empty: the attack alone
    members: tuple[str, ...] = field(default=(), metadata={"key": "omit_empty"})
    # an ensemble member's own random stream (its starts differ from the other members')
    stream: str = field(default="", metadata={"key": False})
    # expectation over transformation: the loss of a step averaged over this many draws of a random defence
    eot: int = field(default=1, metadata={"key": "omit_default"})
    # output-diversified initialisation (Tashiro et al., 2020): this many signed steps of size eps, from the random
    # start, along a random direction of the model's outputs, before each start's own steps (each a pass)
    odi: int = field(default=0, metadata={"key": "omit_default"})

    # the objectives an ensemble may name (the first is the attack's own) and the strong preset's members
    OBJECTIVES: ClassVar[tuple[str, ...]] = ("own",)
    STRONG: ClassVar[tuple[str, ...]] = ("own", "square:250")
    STRONG_ODI: ClassVar[int] = 0  # the strong preset's ODI steps per gradient start (where measured to help)

    def __post_init__(self) -> None:
        if self.optimiser not in OPTIMISERS:
            raise ValueError(f"optimiser must be one of {OPTIMISERS}, got {self.optimiser!r}")
        if self.restarts < 1:
            raise ValueError(f"restarts must be at least 1, got {self.restarts}")
        if self.eot < 1:
            raise ValueError(f"eot must be at least 1, got {self.eot}")
        if self.odi < 0 or (self.odi and self.optimiser == "square"):
            raise ValueError(f"odi ({self.odi}) is a number of gradient steps: at least 0, none under Square")
        if self.schedule is not None and (self.optimiser != "apgd" or self.schedule < self.steps):
            raise ValueError(f"schedule ({self.schedule}) is APGD's: it needs optimiser apgd and at least the "
                             f"{self.steps} steps taken")
        if (self.restarts > 1 or self.members) and self.checkpoints:
            raise ValueError("checkpoints (the sweep's budgets) need a single run: restarts 1, no ensemble")
        for m in self.members:  # each member is an attack of its own: its settings checked as one
            try:
                self.member(m)
            except ValueError as e:
                raise ValueError(f"ensemble member {m!r}: {e}") from None
        if len(set(self.members)) < len(self.members):  # a member's name is its random stream
            raise ValueError(f"ensemble members {self.members} name one member twice: it would repeat the same "
                             "random starts; give it more restarts instead (ce:x2)")

    def member_overrides(self, member: str) -> dict:
        """The fields an ensemble member sets: ``NAME[:[STEPS][xRESTARTS][@SCHEDULE]]`` (``ce``, ``margin:50``,
        ``cosine:x3``, ``square:400``, ``dlr:40x3@100``: three starts, each the first 40 steps of a 100-step APGD
        run), NAME one of ``OBJECTIVES`` or ``square``; unset, the attack's own."""
        name, _, budget = member.partition(":")
        if name != "square" and name not in self.OBJECTIVES:
            raise ValueError(f"use one of {', '.join(self.OBJECTIVES + ('square',))}"
                             "[:[STEPS][xRESTARTS][@SCHEDULE]]")
        found = re.fullmatch(r"([1-9]\d*)?(?:x([1-9]\d*))?(?:@([1-9]\d*))?", budget)
        if not found:
            raise ValueError("the budget is STEPS, xRESTARTS or STEPSxRESTARTS, then optionally @SCHEDULE, "
                             "positive whole numbers")
        out = {k: int(v) for k, v in zip(("steps", "restarts", "schedule"), found.groups()) if v}
        if name == "square":  # one run: its random search is its own restarts
            return {"steps": SQUARE_QUERIES, "schedule": None} | out | {"optimiser": "square", "restarts": 1, "odi": 0}
        return out | self.objective_overrides(name)

    def objective_overrides(self, name: str) -> dict:
        """The fields that make this attack optimise objective ``name`` of ``OBJECTIVES``."""
        return {}

    @classmethod
    def from_config(cls, cfg: Any, judge: Judge, max_new_tokens: int) -> PixelAttack:
        """The attack as an audit's config sets it (``cfg``: an :class:`~mmaudit.audit.config.AuditConfig`)."""
        return cls(judge=judge, max_new_tokens=max_new_tokens, **cls.config_fields(cfg))

    @classmethod
    def config_fields(cls, cfg: Any) -> dict:
        """The fields an audit's config sets (a subclass adds its own)."""
        return {"eps": cfg.eps, "steps": cfg.steps, "alpha": cfg.alpha, "seed": cfg.seed, "early_stop": cfg.early_stop,
                "downscale": cfg.downscale, "optimiser": cfg.optimiser, "restarts": cfg.restarts,
                "members": cls.STRONG if cfg.ensemble else (), "odi": cls.STRONG_ODI if cfg.ensemble else 0,
                "eot": getattr(cfg, "eot", 1)}

    def params(self) -> dict:
        """What identifies this attack's results in the store: every field that decides them (the step size
        resolved; APGD sets its own)."""
        return key_params(self, exclude=("alpha",)) | ({"alpha": self.step_size} if self.optimiser == "pgd" else {})

    @property
    def check_interval(self) -> int:
        """Every how many steps early stopping checks the active samples."""
        return self.check_every

    @property
    def passes_per_step(self) -> int:
        """Forward-backward passes one step costs a sample."""
        return 1

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
    def _objective(self, vlm: VLM, x_adv: list[torch.Tensor], samples: list[Sample], ctx: dict):
        """The objective, its loss averaged over ``eot`` calls (each a new draw of a random defence: a model
        behind one draws per call); the proxy is the last draw's."""
        loss, deviates = self.objective(vlm, x_adv, samples, ctx)
        for _ in range(self.eot - 1):
            more, deviates = self.objective(vlm, x_adv, samples, ctx)
            loss = loss + more
        return loss / self.eot, deviates
    def _start(self, samples: list[Sample], shapes: list[tuple[int, ...]], restart: int = 0) -> list[torch.Tensor]:
        """The starting perturbation: zero, or uniform in the eps-ball; restarts after the first always start at
        random, each from its own seed."""
        if self.optimiser == "square":  # Square starts on vertical stripes at the ball's corners
            return [Square.start(shape, self.eps, self.sample_seed(s, restart)) for s, shape in zip(samples, shapes)]
        if (not self.random_start and restart == 0) or self.eps == 0:
            return [torch.zeros(shape) for shape in shapes]
        noise = []
        for s, shape in zip(samples, shapes):  # per-sample seed: a result never depends on its batch-mates
            g = torch.Generator().manual_seed(self.sample_seed(s, restart))
            noise.append((torch.rand(shape, generator=g) * 2 - 1) * self.eps)
        return noise

    def sample_seed(self, s: Sample, restart: int) -> int:
        """A sample's own random stream for one run (restart) of this attack or of an ensemble member."""
        if self.stream:
            return zlib.crc32(f"{self.seed}:{self.stream}:{restart}:{s.id}".encode())
        if restart:
            return zlib.crc32(f"{self.seed}:{restart}:{s.id}".encode())
        return self.seed * 1_000_003 + zlib.crc32(s.id.encode())

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
        pixel space (whatever the model's precision), and only its own seed, image and answers decide it. With
        restarts, a restart runs only on what earlier ones left unflipped."""
        if self.members:
            return self._ensemble(vlm, samples)
        todo, parts = list(range(len(samples))), []
        for restart in range(self.restarts):
            res = self._run(vlm, [samples[i] for i in todo], restart)
            parts.append((todo, res))
            todo = [i for i, f in zip(todo, res.flipped) if not f]
            if not todo:
                break
        return parts[0][1] if len(parts) == 1 else AttackResult.merged(parts, len(samples))

    def member(self, name: str) -> PixelAttack:
        """Ensemble member ``name`` as an attack of its own: this attack's settings, the member's overrides."""
        return dataclasses.replace(self, members=(), stream=name, **self.member_overrides(name))

    def _ensemble(self, vlm: VLM, samples: list[Sample]) -> AttackResult:
        """Each member on what the earlier ones left unflipped (AutoAttack's composition); a sample keeps the
        image of the member that flipped it, else the last member's."""
        todo, parts, names = list(range(len(samples))), [], []
        for name in self.members:
            res = self.member(name)(vlm, [samples[i] for i in todo])
            parts.append((todo, res))
            names.append(name)
            todo = [i for i, f in zip(todo, res.flipped) if not f]
            if not todo:
                break
        return AttackResult.merged(parts, len(samples), names)

    def outputs(self, vlm: VLM, x_adv: list[torch.Tensor], samples: list[Sample], ctx: dict) -> list[torch.Tensor]:
        """Per sample, the model outputs output-diversified initialisation pushes along a random direction: the
        teacher-forced logits of the reference answer, its real tokens only (padding, which depends on the
        batch-mates, never enters)."""
        scores = vlm.score(x_adv, [s.prompt for s in samples], [s.answer for s in samples])
        return [lg[m].float() for lg, m in zip(scores.logits, scores.mask)]

    def _diversified(self, vlm: VLM, x_opt: list[torch.Tensor], delta: list[torch.Tensor], samples: list[Sample],
                     ctx: dict, restart: int,
                     project: Callable[[int, torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        """ODI (Tashiro et al., 2020): ``odi`` signed steps of size eps maximising w . outputs, w uniform in
        [-1, 1] per output, drawn from the sample's own stream for this start. A random point in the ball barely
        moves the answer; a random direction of the *outputs* sends each start somewhere the model sees
        differently, so restarts explore more (docs/audit.md has the per-start figures)."""
        ws: list[torch.Tensor] = []
        for _ in range(self.odi):
            d = [di.clone().requires_grad_(True) for di in delta]
            outs = self.outputs(vlm, [(xo + di).clamp(0, 1) for xo, di in zip(x_opt, d)], samples, ctx)
            if not ws:
                gens = [torch.Generator().manual_seed(self.sample_seed(s, restart) ^ ODI_STREAM) for s in samples]
                ws = [torch.rand(o.shape, generator=g) * 2 - 1 for o, g in zip(outs, gens)]
            grads = torch.autograd.grad(sum((w * o).sum() for w, o in zip(ws, outs)), d)
            with torch.no_grad():
                delta = [project(i, di + self.eps * g.sign()) for i, (di, g) in enumerate(zip(d, grads))]
        return delta

    def craft(self, samples: list[Sample]) -> AttackResult:
        """The optimisation alone, with no model to ask (a transfer attack optimises surrogates, never its
        target): the full budget for every sample, no flip decided, no answer."""
        return self._run(None, samples, 0)

    def _run(self, vlm: VLM | None, samples: list[Sample], restart: int) -> AttackResult:
        x = [to_image_tensor(s.image, s.id) for s in samples]
        x_u8 = [(xi * 255).round() for xi in x]  # exact integers again: the saved PNG truncates to uint8
        sizes = [tuple(xi.shape[-2:]) for xi in x]
        x_opt = [self._optimised_view(xi) for xi in x]
        ctx = self.prepare(vlm, x_opt, samples)
        start = self._start(samples, [xo.shape for xo in x_opt], restart)
        delta = [(xo + d).clamp(0, 1) - xo for xo, d in zip(x_opt, start)]
        n = len(samples)

        def project(i: int, d: torch.Tensor) -> torch.Tensor:
            d = d.clamp(-self.eps, self.eps)
            return (x_opt[i] + d).clamp(0, 1) - x_opt[i]

        if self.odi and vlm is not None:
            delta = self._diversified(vlm, x_opt, delta, samples, ctx, restart, project)
        early = self.early_stop and vlm is not None
        active = torch.ones(n, dtype=torch.bool)
        steps = [0] * n
        passes = [self.odi if vlm is not None else 0] * n  # ODI's steps are passes too
        answers: list[str | None] = [None] * n
        flipped = [False] * n
        flipped_at: dict[int, list[bool]] = {}

        apgd = APGD(self.eps, self.schedule or self.steps) if self.optimiser == "apgd" else None
        states = [apgd.start() for _ in range(n)] if apgd else []
        square = Square(self.eps, self.steps) if self.optimiser == "square" else None
        if square:
            states = [square.state(self.sample_seed(s, restart)) for s in samples]

        def quantised(i: int) -> torch.Tensor:
            return self.quantise(x_u8[i], self._full_delta(delta[i], sizes[i]))

        def confirm(idx: list[int]) -> None:
            """Generate on the quantised full-size image; a flip is only what J says."""
            if not idx or vlm is None:
                return
            outs = vlm.generate([quantised(i) / 255 for i in idx], [samples[i].prompt for i in idx],
                                self.max_new_tokens)
            for i, out in zip(idx, outs):
                passes[i] += 1
                answers[i] = out
                flipped[i] = not self.judge.correct(out, samples[i])
                if flipped[i] and early:
                    active[i] = False

        for step in range(self.steps if self.eps > 0 else 0):
            idx = torch.nonzero(active).flatten().tolist()
            if not idx:
                break
            sub = [samples[i] for i in idx]
            sub_ctx = {k: (v[idx] if isinstance(v, torch.Tensor) else [v[i] for i in idx]) for k, v in ctx.items()}
            if square:  # the loss alone: propose, score, keep what raised it (or already deviates)
                with torch.no_grad():
                    cands = [square.propose(states[i], delta[i], lambda v, i=i: project(i, v)) for i in idx]
                    loss, deviates = self._objective(vlm, [(x_opt[i] + c).clamp(0, 1) for i, c in zip(idx, cands)],
                                                     sub, sub_ctx)
                    keep = deviates.tolist() if deviates is not None else [False] * len(idx)
                    for i, li, kp in zip(idx, loss.float().tolist(), keep):
                        delta[i] = square.settle(states[i], delta[i], li, kp)
            else:
                d = [delta[i].clone().requires_grad_(True) for i in idx]
                loss, deviates = self._objective(vlm, [(x_opt[i] + di).clamp(0, 1) for i, di in zip(idx, d)], sub,
                                                 sub_ctx)
                grads = torch.autograd.grad(loss.sum(), d)
                losses = loss.detach().float().tolist()
                with torch.no_grad():
                    for i, di, g, li in zip(idx, d, grads, losses):
                        g = g.to(di.dtype)
                        if apgd:
                            delta[i] = apgd.update(states[i], di.detach(), g, li, lambda v, i=i: project(i, v))
                        else:
                            delta[i] = project(i, di + self.step_size * g.sign())
            for i in idx:
                steps[i] += 1
                passes[i] += self.passes_per_step * self.eot
            if early and ((step + 1) % self.check_interval == 0):
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
        if apgd:  # APGD ends on its best point, where a sample is still unflipped
            for i in range(n):
                if active[i] and states[i].best is not None:
                    delta[i] = states[i].best
        # Final answer on the image that will be saved (stopped samples were just confirmed).
        confirm([i for i in range(n) if active[i] or answers[i] is None])
        if self.steps in self.checkpoints:
            flipped_at[self.steps] = list(flipped)
        adv, linf = saved([quantised(i) for i in range(n)], x_u8)
        return AttackResult(adv, [a or "" for a in answers], flipped, steps, passes, linf, flipped_at,
                            [restart] * n)
