"""What happens to an image between the attacker and the model's own preprocessing: delivery channels (what
transport does: JPEG re-encoding, resizing) and defences (what a deployment adds: bit-depth reduction, median
filtering, blur, random resize-and-pad).

A transform is a small dataclass registered by name (``@transform("jpeg", role="channel")``; plugins register
theirs through the ``mmaudit.transforms`` entry points, as attacks do). Each has

* ``real(x, rng)``: what the deployed pipeline does, exactly (Pillow's own JPEG, Pillow's resampling), on a
  (3, H, W) image in [0, 1]; the model is always shown this, and only this decides a flip;
* ``stand_in(x, rng)``: a differentiable approximation for the gradient (kornia's differentiable JPEG, torch's
  resampling), or ``None``: straight-through (BPDA with the identity, Athalye et al., 2018);
* ``random``: whether each application draws its own parameters (then attacks average their loss over ``--eot``
  draws, as AutoAttack's randomised-defence version does).

A pipeline is written ``name:arg+name:arg`` (``jpeg:75+resize:0.5``); :func:`parse` checks every part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mmaudit.errors import UsageError
from mmaudit.plugins import Registry

ROLES = ("channel", "defence")


@dataclass(frozen=True)
class Transform:
    """Base of every transform; ``spec`` is how it is written (``jpeg:75``)."""

    name: ClassVar[str] = ""
    role: ClassVar[str] = "channel"
    random: ClassVar[bool] = False

    @classmethod
    def from_arg(cls, arg: str) -> Transform:
        """The transform its argument text describes; ValueError naming what it takes."""
        raise NotImplementedError

    @property
    def spec(self) -> str:
        raise NotImplementedError

    def real(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def stand_in(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor | None:
        return None


_REGISTRY = Registry("transforms")


def transform(name: str, *, role: str) -> Callable[[type], type]:
    """Register the decorated :class:`Transform` subclass as ``name`` (a channel or a defence)."""
    if role not in ROLES:
        raise ValueError(f"transform {name!r}: role must be one of {ROLES}")

    def entry(cls: type) -> type:
        cls.name, cls.role = name, role
        return cls

    return _REGISTRY.decorator(name, entry)


def transforms() -> dict[str, type]:
    """Every registered transform by name (built-ins and installed plugins)."""
    from mmaudit.models.transforms import builtin  # noqa: F401 - registers the built-ins

    return _REGISTRY.entries()


def parse(spec: str, option: str = "--channel") -> tuple[Transform, ...]:
    """``name:arg+name:arg`` -> the transforms, in order; a bad part is named with what it takes."""
    known = transforms()
    out = []
    for part in filter(None, (p.strip() for p in spec.split("+"))):
        name, _, arg = part.partition(":")
        if name not in known:
            raise UsageError(f"{option} {spec}: unknown transform {name!r}; registered: {', '.join(sorted(known))}")
        try:
            out.append(known[name].from_arg(arg))
        except ValueError as e:
            raise UsageError(f"{option} {spec}: {part}: {e}") from None
    if not out:
        raise UsageError(f"{option} {spec!r}: name at least one transform, e.g. jpeg:75")
    return tuple(out)


@dataclass(frozen=True)
class Pipeline:
    """The channel's transforms, then the defence's: what stands between the attacker's image and the model."""

    channel: tuple[Transform, ...] = ()
    defence: tuple[Transform, ...] = ()
    steps: tuple[Transform, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.channel) + tuple(self.defence))

    @classmethod
    def of(cls, channel: str | None, defence: str | None) -> Pipeline | None:
        if not channel and not defence:
            return None
        return cls(parse(channel, "--channel") if channel else (), parse(defence, "--defence") if defence else ())

    @property
    def random(self) -> bool:
        return any(t.random for t in self.steps)

    def describe(self) -> dict:
        """What keys the records and titles the report: the written specs."""
        return {"channel": "+".join(t.spec for t in self.channel) or None,
                "defence": "+".join(t.spec for t in self.defence) or None}

    def label(self) -> str:
        d = self.describe()
        return " · ".join(f"{k} {v}" for k, v in d.items() if v)

    def real(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        """Exactly what the deployment does to the image (no gradient)."""
        with torch.no_grad():
            for t in self.steps:
                x = t.real(x, rng)
        return x

    def adaptive(self, x: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        """The real output in the forward pass, the stand-ins' gradient in the backward pass (BPDA; the identity
        where a step has no stand-in). One draw of every random step, shared by the forward and the gradient."""
        for t in self.steps:
            state = rng.get_state()
            out = t.real(x.detach(), rng).detach()
            rng.set_state(state)  # the stand-in sees the same draw
            approx = t.stand_in(x, rng)
            if approx is None:
                approx = x
            if tuple(approx.shape) != tuple(out.shape):
                raise ValueError(f"transform {t.spec}: its stand-in gives {tuple(approx.shape)}, the real one "
                                 f"{tuple(out.shape)}")
            x = out + (approx - approx.detach())
        return x
