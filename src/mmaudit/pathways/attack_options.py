"""An attack's own parameters set by name: ``end_pgd:loss=margin,steps=100`` on the command line, ``{"end_pgd":
{"loss": "margin"}}`` from Python.

Every field of an attack's dataclass that holds a plain value (a number, a string, a flag, a tuple of numbers) can
be set; a value is read by the field's type, and the attack's own checks (its ``__post_init__``) then run, so a
bad setting fails before any model runs with one line that names the attack, the field and what it allows. The
fields set this way are the attack's fields, so they key its records like any other setting.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from mmaudit.errors import UsageError
from mmaudit.pathways import registry

PLAIN = (int, float, str, bool)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``name:field=value,field=value`` -> (name, {field: text}); ``name`` alone sets nothing."""
    name, _, rest = spec.partition(":")
    name = name.strip()
    if not registry.known(name):
        raise UsageError(f"--attack {spec}: unknown attack {name!r}; registered: {', '.join(registry.names())}")
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))) if rest else ():
        field, eq, value = part.partition("=")
        if not eq or not field.strip():
            raise UsageError(f"--attack {spec}: {part!r} is not FIELD=VALUE")
        out[field.strip()] = value.strip()
    return name, out


def settable(name: str) -> dict[str, Any]:
    """The fields of an attack that can be set by name -> their types."""
    cls = registry.spec(name).cls
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init and _plain(hints[f.name])}


def _plain(hint) -> bool:
    hint = _unoptional(hint)
    if typing.get_origin(hint) is Literal or hint in PLAIN:
        return True
    return typing.get_origin(hint) is tuple and all(a in PLAIN or a is Ellipsis for a in typing.get_args(hint))


def _unoptional(hint):
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def coerce(name: str, field: str, text: Any, hint) -> Any:
    """``text`` (a string from the command line, or a Python value) as a value of the field's type; a tuple is
    written with ``+`` between its items (the comma separates fields)."""
    where = f"{name}:{field}={text}"
    optional = _unoptional(hint) is not hint
    hint = _unoptional(hint)
    if not isinstance(text, str):
        return tuple(text) if typing.get_origin(hint) is tuple else text
    if optional and text.lower() in ("none", ""):
        return None
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if text not in allowed:
            raise UsageError(f"--attack {where}: {field} must be one of {', '.join(map(str, allowed))}")
        return text
    if hint is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"--attack {where}: {field} is a flag (true or false)")
        return text.lower() in ("true", "1", "yes")
    if typing.get_origin(hint) is tuple:
        kind = next((a for a in typing.get_args(hint) if a is not Ellipsis), str)
        return tuple(_number(where, field, t, kind) for t in text.split("+") if t)  # checkpoints=10+20+40
    return _number(where, field, text, hint) if hint in (int, float) else text


def _number(where: str, field: str, text: str, kind: type):
    try:
        if kind is float and "/" in text:  # 8/255, as every eps is written
            num, den = text.split("/")
            return float(num) / float(den)
        return kind(text)
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"--attack {where}: {field} must be {'an integer' if kind is int else 'a number'}") from None


def checked(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` read by each field's type; an unknown field names those that can be set."""
    fields = settable(name)
    out = {}
    for field, value in options.items():
        if field not in fields:
            raise UsageError(f"--attack {name}:{field}=...: {name} has no parameter {field!r}; it has "
                             f"{', '.join(sorted(fields))}")
        out[field] = coerce(name, field, value, fields[field])
    return out


def apply(attack, options: dict[str, Any]):
    """The attack with ``options`` set, its own checks run again (a refusal becomes one line naming the field)."""
    if not options:
        return attack
    try:
        return dataclasses.replace(attack, **options)
    except (ValueError, TypeError) as e:
        shown = ",".join(f"{k}={v}" for k, v in options.items())
        raise UsageError(f"--attack {attack.name}:{shown}: {e}") from None
