"""Deterministic synthetic visual QA that mirrors the FusionAudit datasets.

Families: ``charts`` (ChartQA-like horizontal bar charts with printed values),
``documents`` (DocVQA-like ``FIELD:VALUE`` forms), ``scenes`` (MME-like shapes:
existence, colour and count) and ``reading`` (any host image with an overlaid
banner, asked with :data:`READING_PROMPT`). Sample ``i`` of a family depends only
on ``(seed, family, i)``, so any slice of a set can be regenerated alone.

Choices made for learnability on a CPU (documented in docs/zoo.md): bars are
horizontal so label, bar and value share a row; the longest bar is unique in
cells; field names in one document start with distinct letters.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np

from mmaudit.data.datasets import Dataset, register
from mmaudit.data.render import BANNER_COLOURS, GRID, SHAPE_COLOURS, SHAPES, TEXT_COLOURS, Canvas
from mmaudit.data.sample import Sample

FAMILIES = ("charts", "documents", "scenes")
ALL_FAMILIES = FAMILIES + ("reading",)
# The zoo's task families in the dataset registry: ChartQA-like charts and DocVQA-like documents judged as their
# real counterparts (and OCR-checked), scenes and the reading probes by exact match; floors for the zoo on its own
# families. Generated, not read: `--data synthetic:N`.
for _entry in (Dataset("charts", "relaxed", 0.5, ocr_evidence=True), Dataset("documents", "anls", 0.5,
               ocr_evidence=True), Dataset("scenes", "exact", 0.5), Dataset("reading", "exact", 0.5)):
    register(_entry)
READING_PROMPT = "what does the text in the image say ?"
FIELDS = ("AGE", "BOX", "DAY", "FEE", "GAS", "KEY", "LOT", "NET", "PIN", "QTY", "REF", "SUM", "TAX", "VAT")
TITLES = ("RECEIPT", "INVOICE", "FORM", "ORDER", "BILL")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
BAR_COLOURS = [(70, 110, 200), (230, 120, 40), (90, 170, 90), (150, 90, 180), (120, 120, 120)]
PALE = [(255, 255, 255), (245, 245, 235), (235, 242, 250), (250, 240, 240), (238, 238, 238)]
QA = tuple[str, str, str]  # question, answer, answer type


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def bar_cells(value: int) -> int:
    """Bar length in cells for a value in 10..99 (1..5 cells)."""
    return min(5, max(1, -(-value // 20)))


def _chart(c: Canvas, rng: np.random.Generator) -> list[QA]:
    n = int(rng.integers(3, 7))
    r0 = int(rng.integers(0, GRID - n + 1))
    labels = rng.choice(list(LETTERS), size=n, replace=False)
    while True:
        values = rng.choice(np.arange(10, 100), size=n, replace=False)
        lengths = [bar_cells(int(v)) for v in values]
        if lengths.count(max(lengths)) == 1:
            break
    colour = _pick(rng, BAR_COLOURS)
    ink = _pick(rng, TEXT_COLOURS)
    for i in range(n):
        row, length = r0 + i, lengths[i]
        lab = str(labels[i])
        c.text(row, 0, lab, ink, role="label", owner=lab)
        c.bar(row, 1, length, colour, owner=lab)
        c.text(row, 1 + length, str(int(values[i])), ink, role="value", owner=lab)
    qas: list[QA] = [(f"what is the value of {lab} ?", str(int(v)), "number") for lab, v in zip(labels, values)]
    longest = str(labels[int(np.argmax(lengths))])
    qas += [("which bar is the longest ?", longest, "label")] * max(1, n // 3)
    return qas


def _document(c: Canvas, rng: np.random.Generator) -> list[QA]:
    n = int(rng.integers(3, 6))
    ink = _pick(rng, TEXT_COLOURS)
    row = 0
    if rng.random() < 0.5:
        title = _pick(rng, TITLES)
        c.text(0, 0, title, ink, role="title")
        row = 1
    row += int(rng.integers(0, GRID - row - n))
    by_letter: dict[str, list[str]] = {}
    for f in FIELDS:
        by_letter.setdefault(f[0], []).append(f)
    letters = rng.choice(sorted(by_letter), size=n, replace=False)
    qas: list[QA] = []
    for i, letter in enumerate(letters):
        name = _pick(rng, by_letter[str(letter)])
        digits = int(rng.integers(1, 5))
        value = str(int(rng.integers(10 ** (digits - 1) if digits > 1 else 0, 10**digits)))
        c.text(row + i, 0, f"{name}:", ink, role="field", owner=name[0])
        c.text(row + i, len(name) + 1, value, ink, role="value", owner=name[0])
        qas.append((f"what is the {name} ?", value, "number"))
    return qas


def _scene(c: Canvas, rng: np.random.Generator) -> list[QA]:
    keep_free = int(rng.integers(GRID))
    cells = [(r, col) for r in range(GRID) for col in range(GRID) if r != keep_free]
    order = rng.permutation(len(cells))
    kind = str(rng.choice(["exists", "colour", "count"], p=[0.4, 0.3, 0.3]))
    target = _pick(rng, SHAPES)
    others = [s for s in SHAPES if s != target]
    colours = list(SHAPE_COLOURS)
    placed: list[tuple[str, str]] = []
    if kind == "count":
        placed += [(target, _pick(rng, colours)) for _ in range(int(rng.integers(1, 6)))]
    elif kind == "colour":
        placed.append((target, _pick(rng, colours)))
    n_other = int(rng.integers(1 if kind != "exists" else 3, 5))
    pool = others if kind != "exists" else list(SHAPES)
    placed += [(_pick(rng, pool), _pick(rng, colours)) for _ in range(n_other)]
    for (shape, colour), k in zip(placed, order):
        c.shape(*cells[int(k)], shape, colour)
    if kind == "count":
        n = sum(1 for s, _ in placed if s == target)
        return [(f"how many {target}s are there ?", str(n), "number")]
    if kind == "colour":
        colour = next(col for s, col in placed if s == target)
        return [(f"what color is the {target} ?", colour, "label")]
    present = set(placed)
    if rng.random() < 0.5:
        shape, colour = placed[int(rng.integers(len(placed)))]
        return [(f"is there a {colour} {shape} ?", "yes", "yes/no")]
    absent = [(s, col) for s in SHAPES for col in colours if (s, col) not in present]
    shape, colour = absent[int(rng.integers(len(absent)))]
    return [(f"is there a {colour} {shape} ?", "no", "yes/no")]


HOSTS: dict[str, Callable[[Canvas, np.random.Generator], list[QA]]] = {
    "charts": _chart,
    "documents": _document,
    "scenes": _scene,
}


def random_string(rng: np.random.Generator, lo: int = 3, hi: int = 6) -> str:
    n = int(rng.integers(lo, hi + 1))
    alphabet = LETTERS + "0123456789" if rng.random() < 0.3 else LETTERS
    return "".join(_pick(rng, alphabet) for _ in range(n))


def add_banner(c: Canvas, rng: np.random.Generator, text: str, role: str = "banner") -> bool:
    """Overlay ``text`` as a typographic banner in a free row; False if none is free."""
    c_rows = [r for r in range(GRID) if not any(c.occupied(r, col) for col in range(GRID))]
    if not c_rows:
        return False
    row = _pick(rng, c_rows)
    col = int(rng.integers(0, GRID - len(text) + 1))
    box_colour, ink = BANNER_COLOURS[int(rng.integers(len(BANNER_COLOURS)))]
    c.text(row, col, text, ink, role=role, banner=box_colour)
    return True


def make_sample(family: str, index: int, seed: int = 0, distractor_banner: float = 0.0) -> Sample:
    """Sample ``index`` of ``family`` under ``seed``; pure function of its arguments."""
    if family not in ALL_FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {ALL_FAMILIES}")
    rng = np.random.default_rng([seed, zlib.crc32(family.encode()), index])
    canvas = Canvas(_pick(rng, PALE))
    host = family if family != "reading" else _pick(rng, FAMILIES)
    qas = HOSTS[host](canvas, rng)
    if family == "reading":
        text = random_string(rng)
        if not add_banner(canvas, rng, text):
            raise AssertionError("generators always leave a free row")
        question, answer, atype = READING_PROMPT, text, "free text"
    else:
        question, answer, atype = qas[int(rng.integers(len(qas)))]
        if distractor_banner and rng.random() < distractor_banner:
            add_banner(canvas, rng, random_string(rng), role="distractor")
    image, layout = canvas.finish()
    return Sample(
        id=f"{family}-{seed}-{index:06d}",
        image=image,
        question=question,
        answer=answer,
        answer_type=atype,
        task_family=family,
        layout=layout,
        meta={"host": host, "seed": seed, "index": index},
    )


def generate(
    families: tuple[str, ...] | list[str] = ALL_FAMILIES,
    n_per_family: int = 200,
    seed: int = 0,
    start: int = 0,
    distractor_banner: float = 0.0,
) -> Iterator[Sample]:
    """Yield ``n_per_family`` samples of each family, interleaved, reproducibly."""
    for i in range(start, start + n_per_family):
        for fam in families:
            yield make_sample(fam, i, seed=seed, distractor_banner=distractor_banner)


def synthetic_set(n_per_family: int = 200, seed: int = 10_000, families=ALL_FAMILIES) -> list[Sample]:
    """The held-out evaluation set (seed 10000 is never used for training)."""
    return list(generate(families, n_per_family, seed=seed))
