"""Task-matching wrong answers, shared by MANTIS and the rendered-text attacks.

Deterministic from the reference (and the image's own text when known): a
number becomes another plausible number of the same form, yes becomes no, a
label becomes another label of the same image or, failing that, of the
dataset's answer vocabulary. Every candidate is checked against the judge J, so
a wrong answer is never one J would accept.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge

_NUMBER = re.compile(r"^(?P<sign>[-+]?)(?P<cur>\$?)(?P<int>\d+)(?:\.(?P<dec>\d+))?(?P<pct>%?)$")
COLOURS = ("red", "green", "blue", "yellow", "black", "white", "orange", "purple")


class NoWrongAnswer(ValueError):
    """No candidate of the same form that J judges incorrect."""


def _rng(*keys: str) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(k.encode()) for k in keys])


def _number_candidates(ref: str, rng: np.random.Generator, n: int = 200):
    m = _NUMBER.match(ref.strip())
    assert m is not None
    digits, dec = m["int"], m["dec"]
    value = int(digits)
    is_year = len(digits) == 4 and 1000 <= value <= 2100 and not dec and not m["pct"]
    for _ in range(n):
        if is_year:
            new = str(value + int(rng.choice([-1, 1])) * int(rng.integers(1, 30)))
        elif len(digits) == 1:
            new = str(int(rng.integers(0, 10)))
        else:  # same digit count, no leading zero
            new = str(int(rng.integers(10 ** (len(digits) - 1), 10 ** len(digits))))
        frac = "." + "".join(str(int(d)) for d in rng.integers(0, 10, len(dec))) if dec else ""
        yield f"{m['sign']}{m['cur']}{new}{frac}{m['pct']}"


def _string_candidates(ref: str, rng: np.random.Generator, n: int = 200):
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ref.isupper() or not ref.isalpha() else "abcdefghijklmnopqrstuvwxyz"
    alphabet = letters + ("0123456789" if any(c.isdigit() for c in ref) else "")
    for _ in range(n):
        yield "".join(str(rng.choice(list(alphabet))) for _ in ref)


def image_labels(sample: Sample) -> list[str]:
    """Text the image itself shows in label roles (chart labels, field names)."""
    if sample.layout is None:
        return []
    return [t.text for t in sample.layout.texts if t.role == "label"]


def wrong_answer(
    sample: Sample,
    judge: Judge | None = None,
    vocabulary: list[str] | None = None,
    salt: str = "",
) -> str:
    """A deterministic answer of the same type that ``judge`` marks incorrect."""
    judge = judge or Judge()
    ref = sample.answer.strip()
    dataset, atype = sample.family, sample.answer_type
    rng = _rng(ref, sample.id, salt)

    def wrong(c: str) -> bool:
        return c.strip() != "" and not judge(c, sample.references, dataset, atype)

    low = ref.lower()
    if atype == "yes/no" or low in ("yes", "no"):
        flipped = {"yes": "no", "no": "yes"}.get(low.split()[0] if low else "", "no")
        return flipped.capitalize() if ref[:1].isupper() else flipped
    if _NUMBER.match(ref):
        for c in _number_candidates(ref, rng):
            if wrong(c):
                return c
        raise NoWrongAnswer(f"sample {sample.id!r}: no number of the form of {ref!r} is judged incorrect")
    if atype == "label":
        pool = [x for x in image_labels(sample) if wrong(x)]
        if not pool:
            vocab = list(vocabulary or []) + (list(COLOURS) if low in COLOURS else [])
            pool = sorted({x for x in vocab if wrong(x)})
        if pool:
            return pool[int(rng.integers(len(pool)))]
    for c in _string_candidates(ref, rng):
        if wrong(c):
            return c
    raise NoWrongAnswer(f"sample {sample.id!r}: no wrong answer found for {ref!r}")


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first token where two token sequences differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) == len(b):
        raise ValueError("sequences are identical: no divergent token")
    return min(len(a), len(b))
