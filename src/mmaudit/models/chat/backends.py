"""Chat backends by name: how `bench run`, `bench audit` and the Python API turn a spec into a chat model.

One grammar for every command: ``embedded`` (the offline SmolLM2), ``endpoint:MODEL@URL`` (an OpenAI-compatible
endpoint; the same spelling as `audit --model`), or ``NAME:ARGS`` for any registered backend. ``@backend(name)``
on a factory ``(args, cache, settings) -> chat model`` registers one; modules that do are found through the
``mmaudit.backends`` entry points (:mod:`mmaudit.plugins`), mmaudit's own as any plugin's. A chat model answers
``chat(messages) -> str`` and may offer ``chat_many``; what the bench needs to know of it it says itself:
``probes`` (an endpoint whose capabilities are probed before the work) and ``evidence_cut`` (a small model's
evidence limit, with the note every report then carries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmaudit.errors import UsageError
from mmaudit.plugins import Registry

Factory = Callable[[str, Path | None, dict], Any]


@dataclass(frozen=True)
class Backend:
    name: str
    make: Factory
    spec: str  # how it is written, for messages and --help


_REGISTRY = Registry("backends")


def backend(name: str, *, spec: str) -> Callable[[Factory], Factory]:
    """Register the decorated factory as backend ``name`` (written ``spec``)."""
    return _REGISTRY.decorator(name, lambda make: Backend(name, make, spec))


def backends() -> dict[str, Backend]:
    return _REGISTRY.entries()


def parse(spec: str | None) -> tuple[str, str, bool]:
    """(backend, its arguments, whether the spec is the old bare ``MODEL@URL`` form)."""
    if not spec or spec == "embedded":
        return "embedded", "", False
    name, colon, args = spec.partition(":")
    if colon and name in backends():
        return name, args, False
    if "@" in spec and not spec.startswith("endpoint:"):
        return "endpoint", spec, True  # MODEL@URL: the spelling before there was one grammar
    known = ", ".join(b.spec for b in backends().values())
    raise UsageError(f"chat model {spec!r}: write one of {known}")


def make_chat(spec: str | None, cache: Path | None = None, **settings: Any):
    """The chat model a spec names, its calls cached in ``cache``; ``settings`` go to the backend (concurrency,
    prices)."""
    name, args, old = parse(spec)
    if old:
        from mmaudit.cli.common import console

        console.print(f"[yellow]{spec!r}: write endpoint:{spec} (the bare MODEL@URL form is deprecated)[/yellow]")
    return backends()[name].make(args, cache, settings)
