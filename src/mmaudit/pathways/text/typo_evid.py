"""Typo-Evid: the task-matching wrong answer as an external typographic overlay on a fixed region.

The baseline of the rendered-text pathway (the paper follows Cheng et al.): a
sticker-like banner, the same place and style on every image, that makes no
attempt to look like part of the host. On the synthetic cell grid the region is
a whole free row (bottom first by default) so the zoo can read the glyphs; on
any other image it is a band along the chosen edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmaudit.data.render import GRID, cell_box, free_rows
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.pathways.registry import attack
from mmaudit.pathways.text.base import Edit, TextAttack, draw_text, on_grid, text_width

POSITIONS = ("bottom", "top")


@attack("typo_evid", display="Typo-Evid", pathway="text", role="baseline", uses_wrong=True, default=True,
        table_position=3)
@dataclass
class TypoEvid(TextAttack):
    position: str = "bottom"  # which edge's free row / band holds the overlay
    ink: tuple[int, int, int] = (255, 230, 0)  # yellow on a dark box: the synthetic banners' own convention
    fill: tuple[int, int, int] = (30, 30, 30)
    size: int | None = None  # font size in px; default 9 on the cell grid, height/10 elsewhere

    @classmethod
    def from_config(cls, cfg: Any, judge: Judge) -> TypoEvid:
        return cls(max_chars=cfg.max_chars, judge=judge, position=cfg.typo_position)

    def edit(self, sample: Sample, text: str) -> Edit:
        if self.position not in POSITIONS:
            raise ValueError(f"position must be one of {POSITIONS}, got {self.position!r}")
        if on_grid(sample):
            lay = sample.layout
            free = free_rows(lay)
            covers = not free
            row = (max(free) if self.position == "bottom" else min(free)) if free else (
                GRID - 1 if self.position == "bottom" else 0)
            box = cell_box(row, 0, len(text))
            image = draw_text(sample.image, box, text, self.ink, self.size or 9, self.fill, cell=lay.cell)
            return Edit(image, text, box, {"editor": "overlay", "row": row, "covers_content": covers})
        h, w = sample.image.shape[:2]
        size = self.size or max(8, h // 10)
        band = int(size * 1.4)
        y0 = h - band if self.position == "bottom" else 0
        box = (0, y0, min(w, text_width(text, size)), y0 + band)
        if box[2] - box[0] < text_width(text, size):
            raise InputError(sample.id, "image", f"too narrow ({w} px) for a {len(text)}-character overlay")
        image = draw_text(sample.image, box, text, self.ink, size, self.fill)
        return Edit(image, text, box, {"editor": "overlay", "size": size})
