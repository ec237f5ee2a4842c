"""Editors behind one interface: add a given text to an image as content of that image, nothing else.

:class:`LayoutEditor` is the embedded editor of Nat-Evid. On synthetic images it
reads the layout metadata and writes the wrong answer the way the host writes
things: a chart entry (label, bar, value) in the chart's ink and bar colour, a
``FIELD:VALUE`` line in the document's ink, a sign in a scene. On any other
image it asks OCR for the host's text lines, takes their height and ink and
left margin, and writes one more line into the first flat band below them.

Every editor only adds: it draws into a region that was blank and pastes back
only that region (:func:`mmaudit.pathways.text.base.paste_box`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from PIL import Image, ImageDraw

from mmaudit.data.render import GRID, cell_box, draw_glyphs, free_rows
from mmaudit.data.sample import Box, Sample
from mmaudit.data.synthetic import bar_cells
from mmaudit.errors import InputError
from mmaudit.pathways.text.base import Edit, draw_text, is_blank, on_grid, paste_box, text_width
from mmaudit.pathways.text.ocr import read_lines

SIGN = ((255, 255, 255), (0, 0, 0))  # ink, board: white letters on a black sign, as the scenes' banners


@runtime_checkable
class ImageEditor(Protocol):
    """Adds ``text`` to ``sample.image`` as host content; returns the edit and the region it touched."""

    name: str

    def params(self) -> dict: ...

    def add_text(self, sample: Sample, text: str) -> Edit: ...


def _row_near_content(sample: Sample) -> int:
    """The free row right below the content, else right above it, else any free row."""
    free = free_rows(sample.layout)
    if not free:
        raise InputError(sample.id, "image", "no free row: text cannot be added without covering content")
    used = [r for r in range(GRID) if r not in free]
    below = [r for r in free if used and r > max(used)]
    above = [r for r in free if used and r < min(used)]
    return min(below) if below else max(above) if above else free[0]


def _subject(sample: Sample, role: str) -> str | None:
    """The host text of ``role`` that the question names (a chart label, a field name)."""
    words = set(re.findall(r"[A-Z0-9]+", sample.question.upper()))
    for t in sample.layout.texts:
        if t.role == role and t.text.rstrip(":") in words:
            return t.text.rstrip(":")
    return None


@dataclass
class LayoutEditor:
    """The embedded Nat-Evid editor: layout metadata when present, OCR otherwise."""

    name: str = "layout"
    blank_tolerance: float = 6.0

    def params(self) -> dict:
        return {"editor": self.name, "blank_tolerance": self.blank_tolerance}

    def add_text(self, sample: Sample, text: str) -> Edit:
        edit = self._grid(sample, text) if on_grid(sample) else self._ocr(sample, text)
        if not is_blank(sample.image, edit.box, self.blank_tolerance):
            raise InputError(sample.id, "image", f"region {edit.box} is not blank: the edit would cover content")
        return edit

    # ------------------------------------------------------------ synthetic hosts
    def _grid(self, sample: Sample, text: str) -> Edit:
        lay = sample.layout
        host = sample.meta.get("host", sample.task_family)
        row = _row_near_content(sample)
        texts = [t for t in lay.texts if t.role in ("label", "value", "field", "title")]
        ink, size = (texts[0].color, texts[0].size) if texts else (SIGN[0], 9)
        canvas = Image.fromarray(sample.image)
        draw = ImageDraw.Draw(canvas)
        cells = 0

        def glyphs(s: str, col: int) -> None:
            draw_text_into(draw, row, col, s, ink, size, lay.cell)

        if host == "charts" and texts:
            label = _subject(sample, "label") if sample.answer_type == "number" else text
            values = [int(t.text) for t in lay.texts if t.role == "value" and t.text.isdigit()]
            value = text if sample.answer_type == "number" else str(min(99, max(values, default=50) + 1))
            label = (label or text)[:1]
            length = max(1, min(bar_cells(int(value)) if value.isdigit() else 1, GRID - len(label) - len(value)))
            bar = next((s["color"] for s in lay.shapes if s["kind"] == "bar"), ink)
            glyphs(label, 0)
            x0, y0, x1, y1 = cell_box(row, len(label), length)
            draw.rectangle((x0, y0 + 1, x1 - 1, y1 - 2), fill=tuple(bar))
            glyphs(value, len(label) + length)
            cells, kind, drawn = len(label) + length + len(value), "chart entry", f"{label} {value}"
        elif host == "documents" and texts:
            name = _subject(sample, "field")
            line = f"{name}:{text}" if name and len(name) + 1 + len(text) <= GRID else text
            glyphs(line, 0)
            cells, kind, drawn = len(line), "field line", line
        else:
            ink, board = SIGN
            col = (GRID - len(text)) // 2
            box = cell_box(row, col, len(text))
            image = draw_text(sample.image, box, text, ink, 9, board, cell=lay.cell)
            return Edit(image, text, box, {"editor": self.name, "kind": "sign", "row": row, "ink": list(ink)})
        if cells > GRID:
            raise InputError(sample.id, "answer", f"wrong answer {text!r} does not fit one row of the grid")
        box = cell_box(row, 0, cells)
        image = paste_box(sample.image, np.asarray(canvas), box)
        return Edit(image, text, box, {"editor": self.name, "kind": kind, "row": row, "drawn": drawn,
                                       "ink": list(ink), "size": size})

    # ------------------------------------------------------------ any image
    def _ocr(self, sample: Sample, text: str) -> Edit:
        img = sample.image
        h, w = img.shape[:2]
        lines = read_lines(img)
        background = np.median(np.concatenate([img[0], img[-1], img[:, 0], img[:, -1]]), 0)
        if lines:
            heights = [ln.box[3] - ln.box[1] for ln in lines]
            size = max(6, int(round(0.75 * float(np.median(heights)))))
            ink = _ink(img, [ln.box for ln in lines], background)
            left = min(ln.box[0] for ln in lines)
            start = max(ln.box[3] for ln in lines)
        else:
            size, left, start = max(8, h // 12), 2, 0
            ink = (0, 0, 0) if background.mean() > 127 else (255, 255, 255)
        text = _field_prefix(lines, sample.question) + text
        band = int(size * 1.4)
        width = text_width(text, size)
        left = min(left, w - width)
        if left < 0:
            raise InputError(sample.id, "image", f"too narrow ({w} px) for {text!r} at {size} px")
        flat = np.abs(img.astype(float) - background).max(-1)[:, left : left + width].max(-1) <= self.blank_tolerance
        y0 = _free_band(flat, band, start)
        if y0 is None:
            raise InputError(sample.id, "image", "no blank band to add a text line without covering content")
        box: Box = (left, y0, left + width, y0 + band)
        image = draw_text(img, box, text, ink, size)
        return Edit(image, text, box, {"editor": self.name, "kind": "text line (ocr)", "size": size,
                                       "ink": list(ink), "ocr_lines": len(lines)})


def draw_text_into(draw: ImageDraw.ImageDraw, row: int, col: int, text: str, ink, size: int, cell: int) -> None:
    x0, y0, _, _ = cell_box(row, col)
    draw_glyphs(draw, x0, y0, cell, text, size, ink)


def _field_prefix(lines, question: str) -> str:
    """'NET:' when an OCR line reads 'NET: 616' and the question asks for NET: the host's own form."""
    words = {w for w in re.findall(r"[a-z0-9]+", question.lower()) if len(w) > 1}
    for ln in lines:
        head, colon, _ = ln.text.partition(":")
        if colon and "".join(head.lower().split()) in words:
            return "".join(head.split()) + ":"
    return ""


def _ink(img: np.ndarray, boxes: list[Box], background: np.ndarray) -> tuple[int, int, int]:
    """Median colour of the pixels in the text boxes that stand out from the background."""
    px = np.concatenate([img[y0:y1, x0:x1].reshape(-1, 3) for x0, y0, x1, y1 in boxes])
    far = px[np.abs(px.astype(float) - background).max(-1) > 60]
    return tuple(int(v) for v in np.median(far if len(far) else px, 0))  # type: ignore[return-value]


def _free_band(flat_rows: np.ndarray, band: int, start: int) -> int | None:
    """First y >= ``start`` (else any y) where ``band`` consecutive rows are flat."""
    ok = np.convolve(flat_rows.astype(int), np.ones(band, int), "valid") == band
    candidates = np.nonzero(ok)[0]
    after = candidates[candidates >= start]
    if len(after):
        return int(after[0])
    return int(candidates[-1]) if len(candidates) else None
