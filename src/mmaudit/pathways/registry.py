"""The attack registry: one decorated class declares everything the audit, the statistics and the report need.

An attack is a dataclass whose fields are its parameters; ``@attack(...)`` names it and says

* its ``pathway`` ("pixel": optimised in pixel space, needs gradients; "text": an edit that needs none),
* its ``role`` in the risk accounting: a "baseline" joins R0, an "enhanced" attack joins R+ only and its
  exclusive flips δ are counted against the baselines it ``enhances``,
* whether its records depend on the sample's task-matching wrong answer (``uses_wrong``: a flag, or a function of
  its parameters for an attack that uses one only in some settings),
* whether it spends model passes (``counts_passes``: the report's mean passes per sample),
* its place in the AutoAttack-style union schedule (``union_position``: run only on what earlier attacks left),
* whether it belongs to the default suite (the paper's five attacks do),
* whether it is crafted without the target (``transfer_only``: made on surrogates by `mmaudit audit transfer`,
  never run white-box),
* whether its edits go through the OCR evidence check (``evidence_check``: does non-generative OCR still read the
  ground truth on the edited image? Nat-Evid's, which draws its text as host content),
* whether a pixel attack also runs on a black-box target (``black_box``: it asks for answers and their
  log-probabilities only, as Square does; other pixel attacks are "not applicable" there).

Its store key is derived from its fields (:func:`key_params`), so a subclass that adds a field can never reuse the
records of another setting. The order of registration is the order of every table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Pathway = Literal["pixel", "text"]
Role = Literal["baseline", "enhanced"]


@dataclass(frozen=True)
class AttackSpec:
    name: str
    cls: type
    display: str
    pathway: Pathway
    role: Role
    enhances: tuple[str, ...] = ()
    uses_wrong: bool | Callable[[dict], bool] = False
    counts_passes: bool = False
    union_position: int | None = None
    default: bool = False
    table_position: int | None = None
    transfer_only: bool = False
    evidence_check: bool = False
    black_box: bool = False


_REGISTRY: dict[str, AttackSpec] = {}


def attack(name: str, *, display: str, pathway: Pathway, role: Role, enhances: tuple[str, ...] = (),
           uses_wrong: bool | Callable[[dict], bool] = False, counts_passes: bool | None = None,
           union_position: int | None = None, default: bool = False, table_position: int | None = None,
           transfer_only: bool = False, evidence_check: bool = False,
           black_box: bool = False) -> Callable[[type], type]:
    """Register the decorated attack class under ``name`` (see the module docstring for the fields;
    ``table_position`` places it in tables, else it follows every placed attack in registration order)."""
    if pathway not in ("pixel", "text"):
        raise ValueError(f"attack {name!r}: pathway must be pixel or text, got {pathway!r}")
    if role not in ("baseline", "enhanced"):
        raise ValueError(f"attack {name!r}: role must be baseline or enhanced, got {role!r}")
    if (role == "enhanced") != bool(enhances):
        raise ValueError(f"attack {name!r}: an enhanced attack names the baselines it enhances, a baseline none")
    if evidence_check and pathway != "text":
        raise ValueError(f"attack {name!r}: only a rendered-text attack's edits go through the OCR evidence check")

    def register(cls: type) -> type:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"attack {name!r}: {cls.__name__} must be a dataclass (its fields are its parameters)")
        cls.name = name
        spec = AttackSpec(name, cls, display, pathway, role, tuple(enhances), uses_wrong,
                          pathway == "pixel" if counts_passes is None else counts_passes, union_position, default,
                          table_position, transfer_only, evidence_check, black_box)
        _REGISTRY[name] = spec
        return cls

    return register


def unregister(name: str) -> None:
    """Remove an attack (a test's toy attack, once the test is done)."""
    _REGISTRY.pop(name, None)


def spec(name: str) -> AttackSpec:
    _load_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"unknown attack {name!r}; choose from {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def known(name: str) -> bool:
    _load_builtin()
    return name in _REGISTRY


def specs() -> list[AttackSpec]:
    """Every registered attack in table order: by ``table_position``, then in registration order."""
    _load_builtin()
    placed = sorted((s for s in _REGISTRY.values() if s.table_position is not None), key=lambda s: s.table_position)
    return placed + [s for s in _REGISTRY.values() if s.table_position is None]


def names(pathway: Pathway | None = None) -> list[str]:
    return [s.name for s in specs() if pathway is None or s.pathway == pathway]


def table_rank(name: str) -> int:
    """Where an attack stands in tables (an unknown one last)."""
    order = names()
    return order.index(name) if name in order else len(order)


def default_suite() -> list[str]:
    return [s.name for s in specs() if s.default]


def baselines() -> list[str]:
    return [s.name for s in specs() if s.role == "baseline"]


def enhanced() -> dict[str, tuple[str, ...]]:
    """Enhanced attack -> the baselines its δ is measured against."""
    return {s.name: s.enhances for s in specs() if s.role == "enhanced"}


def display(name: str) -> str:
    """The attack's name in tables and pages (an unknown name as it is)."""
    _load_builtin()
    return _REGISTRY[name].display if name in _REGISTRY else name


def uses_wrong(params: dict) -> bool:
    """Whether records of the attack with these parameters depend on the wrong answer (their keys include it)."""
    name = params.get("name", "")
    if not known(name):
        return False
    flag = _REGISTRY[name].uses_wrong
    return bool(flag(params) if callable(flag) else flag)


def is_pixel(name: str) -> bool:
    return known(name) and _REGISTRY[name].pathway == "pixel"


def is_text(name: str) -> bool:
    return known(name) and _REGISTRY[name].pathway == "text"


def union_order() -> list[str]:
    """The union schedule's order: attacks with a union position, by position."""
    return [s.name for s in sorted((s for s in specs() if s.union_position is not None),
                                   key=lambda s: s.union_position)]


def key_params(obj, exclude: tuple[str, ...] = ()) -> dict:
    """An attack's parameters as its store key: its name and every dataclass field (tuples as lists, as JSON reads
    them back), except fields declared ``metadata={"key": False}`` and those in ``exclude``. Field metadata
    ``{"key": "omit_empty"}`` leaves the field out while it is empty, ``{"key": "omit_default"}`` while it has its
    default (a parameter added later keeps the keys of the runs made before it), ``{"key": "merge"}`` merges the
    value's own ``params()`` (an editor's), ``{"key": "nested"}`` keeps them under the field's name."""
    out: dict = {"name": obj.name}
    for f in dataclasses.fields(obj):
        mode = f.metadata.get("key", True)
        if mode is False or f.name in exclude:
            continue
        value = getattr(obj, f.name)
        if (mode == "omit_empty" and not value) or (mode == "omit_default" and value == f.default):
            continue
        if mode == "merge":
            out |= value.params()
        elif mode == "nested":
            out[f.name] = value.params()
        else:
            out[f.name] = _json_like(value)
    return out


def _json_like(value):
    if isinstance(value, (tuple, list)):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_like(v) for k, v in value.items()}
    return value


def _load_builtin() -> None:
    """Import the attack modules the ``mmaudit.attacks`` entry points name (mmaudit's own and installed plugins'):
    they register themselves (:mod:`mmaudit.plugins`)."""
    from mmaudit import plugins

    plugins.load("attacks")
