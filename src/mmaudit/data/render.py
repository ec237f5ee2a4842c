"""Drawing on the synthetic cell grid: glyphs, bars, shapes and banners.

Every synthetic image is a grid of square cells; a cell holds at most one glyph
or shape. The grid gives the zoo dense supervision (what each cell holds) and
gives the text attacks exact boxes to write into.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from mmaudit.data.sample import Box, Layout, TextElement

CELL = 8
GRID = 8
SIZE = CELL * GRID
FONT_NAME = "Aileron-Regular (Pillow built-in)"
CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ:"
SHAPES = ("circle", "square", "triangle")
SHAPE_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 215),
    "yellow": (225, 195, 20),
}
CELL_CLASSES: tuple[str, ...] = (
    ("empty",) + tuple(CHARS) + ("bar",) + tuple(f"{c} {s}" for s in SHAPES for c in SHAPE_COLOURS)
)
CLASS_INDEX = {name: i for i, name in enumerate(CELL_CLASSES)}
STYLES = ("plain", "banner")
OWNERS = ("none",) + tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # the label/field letter a cell belongs to
MAX_ORDER = 8  # order classes 0..7 = index of a glyph within its text element, 8 = not a glyph
TEXT_COLOURS = [(0, 0, 0), (20, 20, 90), (90, 20, 20), (10, 70, 30), (60, 60, 60)]
BANNER_COLOURS = [((0, 0, 0), (255, 255, 255)), ((30, 30, 30), (255, 230, 0)), ((120, 0, 0), (255, 255, 255))]


@lru_cache(maxsize=8)
def font(size: int) -> ImageFont.FreeTypeFont:
    """Pillow's bundled font: the same glyphs on every machine, no font files needed."""
    return ImageFont.load_default(size=size)


def cell_box(row: int, col: int, width: int = 1) -> Box:
    return (col * CELL, row * CELL, (col + width) * CELL, (row + 1) * CELL)


def draw_glyphs(draw: ImageDraw.ImageDraw, x0: int, y0: int, cell: int, text: str, size: int,
                color: tuple[int, int, int]) -> None:
    """One glyph centred in each ``cell``-pixel square from (x0, y0): the zoo reads text on this grid."""
    for i, ch in enumerate(text):
        if ch not in CLASS_INDEX or ch == " ":
            raise ValueError(f"glyph {ch!r} is not drawable on the cell grid (allowed: {CHARS})")
        draw.text((x0 + i * cell + cell / 2, y0 + cell / 2), ch, font=font(size), fill=color, anchor="mm")


class Canvas:
    """An image under construction plus the dense cell labels that describe it."""

    def __init__(self, background: tuple[int, int, int]) -> None:
        self.image = Image.new("RGB", (SIZE, SIZE), background)
        self.draw = ImageDraw.Draw(self.image)
        self.layout = Layout(
            size=(SIZE, SIZE),
            cell=CELL,
            background=background,
            cell_class=np.zeros((GRID, GRID), dtype=np.int64),
            cell_style=np.zeros((GRID, GRID), dtype=np.int64),
            cell_owner=np.zeros((GRID, GRID), dtype=np.int64),
            cell_order=np.full((GRID, GRID), MAX_ORDER, dtype=np.int64),
        )

    def occupied(self, row: int, col: int) -> bool:
        return bool(self.layout.cell_class[row, col] != 0) or bool(self.layout.cell_style[row, col] != 0)

    def text(
        self,
        row: int,
        col: int,
        text: str,
        color: tuple[int, int, int],
        size: int = 9,
        role: str = "label",
        banner: tuple[int, int, int] | None = None,
        owner: str | None = None,
    ) -> TextElement:
        """Write one glyph per cell from (row, col); a banner gets a filled box behind it."""
        if col + len(text) > GRID:
            raise ValueError(f"text {text!r} does not fit from column {col}")
        box = cell_box(row, col, len(text))
        if banner is not None:
            self.draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=banner)
        draw_glyphs(self.draw, box[0], box[1], CELL, text, size, color)
        for i, ch in enumerate(text):
            self.layout.cell_class[row, col + i] = CLASS_INDEX[ch]
            self.layout.cell_style[row, col + i] = 1 if banner is not None else 0
            self.layout.cell_order[row, col + i] = min(i, MAX_ORDER - 1)
            if owner:
                self.layout.cell_owner[row, col + i] = OWNERS.index(owner)
        element = TextElement(text, box, FONT_NAME, size, color, role, banner)
        self.layout.texts.append(element)
        return element

    def bar(self, row: int, col: int, length: int, color: tuple[int, int, int], owner: str | None = None) -> None:
        x0, y0, x1, y1 = cell_box(row, col, length)
        self.draw.rectangle((x0, y0 + 1, x1 - 1, y1 - 2), fill=color)
        self.layout.cell_class[row, col : col + length] = CLASS_INDEX["bar"]
        if owner:
            self.layout.cell_owner[row, col : col + length] = OWNERS.index(owner)
        self.layout.shapes.append({"kind": "bar", "box": (x0, y0, x1, y1), "color": color})

    def shape(self, row: int, col: int, kind: str, colour: str) -> None:
        x0, y0, x1, y1 = cell_box(row, col)
        fill = SHAPE_COLOURS[colour]
        if kind == "circle":
            self.draw.ellipse((x0 + 1, y0 + 1, x1 - 2, y1 - 2), fill=fill)
        elif kind == "square":
            self.draw.rectangle((x0 + 1, y0 + 1, x1 - 2, y1 - 2), fill=fill)
        else:
            self.draw.polygon([(x0 + 3.5, y0 + 1), (x1 - 1, y1 - 2), (x0, y1 - 2)], fill=fill)
        self.layout.cell_class[row, col] = CLASS_INDEX[f"{colour} {kind}"]
        self.layout.shapes.append({"kind": kind, "colour": colour, "box": (x0, y0, x1, y1)})

    def finish(self) -> tuple[np.ndarray, Layout]:
        """Freeze the image; free regions are the rows left completely empty."""
        rows_free = [r for r in range(GRID) if not any(self.occupied(r, c) for c in range(GRID))]
        self.layout.free_regions = [cell_box(r, 0, GRID) for r in rows_free]
        return np.asarray(self.image, dtype=np.uint8).copy(), self.layout


def free_rows(layout: Layout) -> list[int]:
    return [box[1] // layout.cell for box in layout.free_regions]
