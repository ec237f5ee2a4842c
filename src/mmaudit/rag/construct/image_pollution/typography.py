"""FigStep-style typography: a concise false claim rendered into the image in an authoritative style.

A dark caption bar across the bottom with the claim in bold white type (the
release's ``pil_caption_bar``), wrapped to the image width; the font size is a
fraction of the image height so OCR and models can read it.
"""

from __future__ import annotations

import textwrap

import numpy as np
from PIL import Image, ImageDraw

from mmaudit.data.render import font
from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted


def render_claim(image: np.ndarray, claim: str, size_frac: float = 0.075, bar=(15, 20, 45),
                 ink=(255, 255, 255)) -> np.ndarray:
    h, w = image.shape[:2]
    size = max(10, int(h * size_frac))
    f = font(size)
    per_line = max(8, int(w / (0.55 * size)))
    lines = textwrap.wrap(claim, per_line)[:3]
    line_h = int(size * 1.3)
    top = h - line_h * len(lines) - size // 2
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    draw.rectangle((0, top, w, h), fill=bar)
    for i, line in enumerate(lines):
        draw.text((size // 2, top + size // 4 + i * line_h), line, font=f, fill=ink, stroke_width=0)
    return np.asarray(canvas)


def figstep_typography(item: ImageItem, ctx: OpContext, size_frac: float = 0.075) -> Polluted:
    if not ctx.false_claim:
        raise ValueError(f"question {item.qid}: no false claim to render")
    return Polluted("figstep_typography", render_claim(item.image, ctx.false_claim, size_frac), item.alt_text,
                    item.title, "pil_caption_bar", prompt=ctx.false_claim,
                    rationale=f"figstep_typography | subject: {item.subject[:40]}", params={"size_frac": size_frac})
