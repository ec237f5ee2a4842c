"""The sample record every loader and generator produces, with layout metadata.

Layout metadata (text boxes, fonts, colours, free regions) is what lets the
rendered-text attacks add text that matches the host image.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from mmaudit.errors import InputError

AnswerType = Literal["number", "label", "yes/no", "free text"]
ANSWER_TYPES: tuple[str, ...] = ("number", "label", "yes/no", "free text")
Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels, x1/y1 exclusive


@dataclass(frozen=True)
class TextElement:
    """One run of text drawn in the image, with the style it was drawn in."""

    text: str
    box: Box
    font: str
    size: int
    color: tuple[int, int, int]
    role: str  # label, value, field, title, banner, overlay
    background: tuple[int, int, int] | None = None


@dataclass
class Layout:
    """Where everything in a synthetic image is, cell by cell."""

    size: tuple[int, int]  # (height, width)
    cell: int
    background: tuple[int, int, int]
    texts: list[TextElement] = field(default_factory=list)
    shapes: list[dict] = field(default_factory=list)
    free_regions: list[Box] = field(default_factory=list)
    cell_class: np.ndarray | None = None  # (rows, cols) int: dense glyph/shape labels
    cell_style: np.ndarray | None = None  # (rows, cols) int: 0 plain, 1 banner
    cell_owner: np.ndarray | None = None  # (rows, cols) int: letter of the label/field a cell belongs to
    cell_order: np.ndarray | None = None  # (rows, cols) int: glyph index within its text element


@dataclass
class Sample:
    """One visual question: an RGB uint8 image, a question and its reference answer."""

    id: str
    image: np.ndarray  # (H, W, 3) uint8
    question: str
    answer: str
    answer_type: str
    task_family: str = "custom"  # the dataset or synthetic task family (J's rule and the wrong answers read it)
    layout: Layout | None = None
    meta: dict = field(default_factory=dict)
    instruction: str = ""  # the task's answer-format instruction, shown after the question (see ``prompt``)

    @property
    def prompt(self) -> str:
        """What the model is asked: the question, then the instruction on its own line (where there is one).
        Every clean pass, attack and check shows the model this; J judges against the dataset's answer."""
        return f"{self.question}\n{self.instruction}" if self.instruction else self.question

    @property
    def references(self) -> tuple[str, ...]:
        """Every accepted answer: ``meta["answers"]`` when the dataset lists several, else the answer."""
        return tuple(str(a) for a in self.meta.get("answers") or [self.answer])

    def validate(self) -> Sample:
        """Raise an :class:`InputError` naming this sample and the bad field."""
        img = self.image
        if not isinstance(img, np.ndarray):
            raise InputError(self.id, "image", f"expected a numpy array, got {type(img).__name__}")
        if img.ndim != 3 or img.shape[2] != 3:
            raise InputError(self.id, "image", f"expected shape (H, W, 3), got {tuple(img.shape)}")
        if img.dtype != np.uint8:
            raise InputError(self.id, "image", f"expected dtype uint8, got {img.dtype}")
        if not self.question or not self.question.strip():
            raise InputError(self.id, "question", "is empty")
        if not self.answer or not str(self.answer).strip():
            raise InputError(self.id, "answer", "reference answer is empty")
        if self.answer_type not in ANSWER_TYPES:
            raise InputError(self.id, "answer_type", f"{self.answer_type!r} is not one of {ANSWER_TYPES}")
        return self


def sample_fingerprint(s: Sample) -> str:
    """Content hash of what a model sees and is judged against: part of every store key."""
    h = hashlib.sha256(s.image.tobytes())
    h.update(f"{s.image.shape}|{s.question}|{s.answer}|{s.answer_type}|{s.task_family}".encode())
    if s.instruction:  # a bare question keeps the keys it always had
        h.update(f"|{s.instruction}".encode())
    return h.hexdigest()[:16]
