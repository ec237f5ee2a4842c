"""The SATR methods `mmaudit bench run` scores, one registered router each: the three single branches, the
baselines and SATR's routers (Field-Selector, Soft-Conductor).

A router is a function of a row's three candidate answers and the replies the run asked for that row (the
self-check and triage gates, TextTrust, the select-only and the composing resolver): it returns its decision
and the replies it used (a failed one fails that method-row). ``@router(name, display=...)`` registers it;
:func:`routers` lists every registered one, mmaudit's own (this module, listed under the ``mmaudit.routers``
entry point) and installed plugins', in registration order: that order is the order of every bench table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mmaudit.plugins import Registry
from mmaudit.rag.evaluate import routers as r
from mmaudit.rag.evaluate.routers import Candidates, Resolution, Routed


@dataclass(frozen=True)
class RowReplies:
    """What the run asked for one row, besides its candidates."""

    check: str  # the self-check gate's reply
    triage: str
    text_trust: str
    select: Resolution  # the select-only resolver (Field-Selector's)
    compose: Resolution  # the composing resolver (Soft-Conductor's)


Decide = Callable[[Candidates, RowReplies], tuple[Routed, tuple]]
BRANCH_METHODS = r.SOURCES  # the three branches, one method each, no routing: the tables' references


@dataclass(frozen=True)
class Router:
    name: str  # the method's name in tables, records and `--methods`
    display: str  # the paper's name
    decide: Decide


_REGISTRY = Registry("routers")


def router(name: str, *, display: str) -> Callable[[Decide], Decide]:
    """Register the decorated ``decide(candidates, replies) -> (Routed, replies used)`` as method ``name``."""
    return _REGISTRY.decorator(name, lambda decide: Router(name, display, decide))


def routers() -> dict[str, Router]:
    return _REGISTRY.entries()


def methods() -> tuple[str, ...]:
    """Every registered method, in table order."""
    return tuple(routers())


def display(name: str) -> str:
    found = routers().get(name)
    return found.display if found else name


def _branches(c: Candidates) -> tuple[str, str, str]:
    return c.parametric, c.text_only, c.full_mm


@router("parametric", display="Parametric")
def parametric(c: Candidates, x: RowReplies):
    return Routed(c.parametric, "FALLBACK"), (c.parametric,)


@router("text_only", display="Text-only")
def text_only(c: Candidates, x: RowReplies):
    return Routed(c.text_only, "TEXT_ONLY"), (c.text_only,)


@router("full_mm", display="Full-MM")
def full_mm(c: Candidates, x: RowReplies):
    return Routed(c.full_mm, "FULL_MM"), (c.full_mm,)


@router("answer_consensus", display="Answer Consensus")
def answer_consensus(c: Candidates, x: RowReplies):
    return r.answer_consensus(c), _branches(c)


@router("selfcheck_gate", display="Self-check Gate")
def selfcheck_gate(c: Candidates, x: RowReplies):
    return r.self_check_gate(c, x.check), (x.check, *_branches(c))


@router("triage_gate", display="Triage Gate")
def triage_gate(c: Candidates, x: RowReplies):
    return r.triage_gate(c, x.triage), (x.triage, *_branches(c))


@router("cascaded_router", display="Cascaded Router")
def cascaded_router(c: Candidates, x: RowReplies):
    return r.cascaded_router(c, x.check, x.triage), (x.check, x.triage, *_branches(c))


@router("text_trust", display="TextTrust")
def text_trust(c: Candidates, x: RowReplies):
    return r.text_trust(c, x.text_trust), (x.text_trust, *_branches(c))


@router("field_selector", display="Field-Selector")
def field_selector(c: Candidates, x: RowReplies):
    return r.gated_router("field", c, x.select, x.check), (x.select.raw, x.check, *_branches(c))


@router("soft_conductor", display="Soft-Conductor")
def soft_conductor(c: Candidates, x: RowReplies):
    return r.gated_router("soft", c, x.compose, x.check), (x.compose.raw, x.check, *_branches(c))
