"""What every rendered-text attack produces, and how text is drawn so that only its box changes.

An :class:`Edit` is the attacked image plus the one box it may differ in. Every
editor draws on a copy and then pastes back only that box, so "pixels outside
the inserted region are unchanged" holds by construction, and
:func:`changed_outside` lets a test (or a user's own editor) check it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from PIL import Image, ImageDraw

from mmaudit.data.render import GRID, draw_glyphs, font
from mmaudit.data.sample import Box, Sample
from mmaudit.judge.match import Judge
from mmaudit.pathways.registry import key_params
from mmaudit.pathways.wrong import wrong_answer


@dataclass
class Edit:
    """An image with text added inside ``box`` (x0, y0, x1, y1; x1/y1 exclusive)."""

    image: np.ndarray  # (H, W, 3) uint8
    text: str  # the string actually drawn (after truncation / case folding)
    box: Box
    style: dict = field(default_factory=dict)  # how and where it was drawn; stored with every record


def on_grid(sample: Sample) -> bool:
    """True for images drawn on the synthetic cell grid (the zoo reads one glyph per cell)."""
    lay = sample.layout
    return lay is not None and lay.cell_class is not None and tuple(sample.image.shape[:2]) == tuple(lay.size)


def paste_box(original: np.ndarray, drawn: np.ndarray, box: Box) -> np.ndarray:
    """``original`` with only ``box`` taken from ``drawn``: the add-only guarantee."""
    x0, y0, x1, y1 = box
    out = original.copy()
    out[y0:y1, x0:x1] = drawn[y0:y1, x0:x1]
    return out


def changed_outside(original: np.ndarray, edited: np.ndarray, box: Box) -> int:
    """Number of pixels outside ``box`` that differ (0 for an add-only edit)."""
    x0, y0, x1, y1 = box
    diff = np.any(original != edited, axis=-1)
    diff[y0:y1, x0:x1] = False
    return int(diff.sum())


def is_blank(image: np.ndarray, box: Box, tolerance: float = 6.0) -> bool:
    """Whether ``box`` holds only a flat background (so drawing there covers nothing)."""
    x0, y0, x1, y1 = box
    region = image[y0:y1, x0:x1].reshape(-1, 3).astype(float)
    return region.size > 0 and float(np.abs(region - np.median(region, 0)).max()) <= tolerance


def draw_text(
    image: np.ndarray,
    box: Box,
    text: str,
    ink: tuple[int, int, int],
    size: int,
    fill: tuple[int, int, int] | None = None,
    cell: int | None = None,
) -> np.ndarray:
    """Draw ``text`` into ``box`` (one glyph per cell when ``cell`` is given) and return the add-only result."""
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    x0, y0, x1, y1 = box
    if fill is not None:
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=fill)
    if cell:
        draw_glyphs(draw, x0, y0, cell, text, size, ink)
    else:
        draw.text((x0 + 1, (y0 + y1) / 2), text, font=font(size), fill=ink, anchor="lm")
    return paste_box(image, np.asarray(canvas), box)


def text_width(text: str, size: int) -> int:
    left, _, right, _ = font(size).getbbox(text)
    return int(right - left) + 2


def mask_box(image: np.ndarray, box: Box) -> np.ndarray:
    """Cover ``box`` with black (the paper's evidence-preservation check)."""
    x0, y0, x1, y1 = box
    out = image.copy()
    out[y0:y1, x0:x1] = 0
    return out


@dataclass
class TextAttack:
    """Base of Typo-Evid and Nat-Evid: fix the wrong answer first, then draw it; ``atk(sample) -> Edit``. A subclass
    registers itself with ``@attack(...)`` (:mod:`mmaudit.pathways.registry`); its fields form its store key."""

    name: ClassVar[str] = "text"
    max_chars: int = 16  # L: longer wrong answers are cut to L characters (and to the grid's width)
    judge: Judge = field(default_factory=Judge, metadata={"key": False})

    @classmethod
    def from_config(cls, cfg: Any, judge: Judge) -> TextAttack:
        """The attack as an audit's config sets it (``cfg``: an :class:`~mmaudit.audit.config.AuditConfig`)."""
        return cls(max_chars=cfg.max_chars, judge=judge)

    def params(self) -> dict:
        """What identifies this attack's results in the store: every field that decides them."""
        return key_params(self)

    def text_for(self, sample: Sample) -> str:
        """The task-matching wrong answer as it will be drawn (upper case on the zoo's glyph grid)."""
        text = wrong_answer(sample, self.judge)
        if on_grid(sample):
            return text.upper()[: min(self.max_chars, GRID)]
        return text[: self.max_chars]

    def edit(self, sample: Sample, text: str) -> Edit:
        raise NotImplementedError

    def __call__(self, sample: Sample) -> Edit:
        return self.edit(sample, self.text_for(sample))
