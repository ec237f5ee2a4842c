"""Strict JSON for everything the tool writes: a number that is not finite is written as null.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which JavaScript's ``JSON.parse`` and every strict
parser refuse. In mmaudit a null number means "not defined here": a rate over an empty set (no clean-correct
question, no overlay read), a correlation over constant ranks, or a quantity whose attacks were not run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def finite(obj):
    """``obj`` with every non-finite float (NaN, ±inf) replaced by None and numpy scalars made Python ones."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj, **kwargs) -> str:
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


def write_json(path: Path, obj, **kwargs) -> Path:
    path = Path(path)
    path.write_text(dumps(obj, indent=2, **kwargs))
    return path
