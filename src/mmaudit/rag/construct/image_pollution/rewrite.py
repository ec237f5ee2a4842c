"""Semantic entity rewrite: edit what the image depicts toward a wrong entity or attribute, through an editor.

Any object with ``edit(image, instruction) -> (image, box)`` will do: a
generative editor (:class:`mmaudit.pathways.text.generative.GenerativeEditor`,
for an instruction-following model or an HTTP endpoint) or, offline, the
:class:`LocalRecolour` editor, which changes one depicted attribute: it finds
the largest region that stands out from the background and turns its colour to
the instructed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mmaudit.data.sample import Box
from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted

COLOURS = {"red": (200, 40, 40), "green": (40, 150, 60), "blue": (40, 80, 200), "purple": (130, 60, 170),
           "orange": (235, 130, 30), "black": (25, 25, 25)}


class RewriteEditor(Protocol):
    name: str

    def edit(self, image: np.ndarray, instruction: str, sample_id: str | None = None) -> tuple[np.ndarray, Box]: ...


@dataclass
class LocalRecolour:
    """Offline rewrite: recolour the dominant foreground object (the instruction names the new colour)."""

    name: str = "local_recolour"
    threshold: float = 60.0

    def edit(self, image: np.ndarray, instruction: str, sample_id: str | None = None) -> tuple[np.ndarray, Box]:
        colour = next((c for c in COLOURS if c in instruction.lower()), "purple")
        bg = np.median(np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]]), 0)
        dist = np.abs(image.astype(float) - bg).max(-1)
        fg = dist > self.threshold
        # the largest colour cluster of the foreground: quantise colours, take the commonest
        q = (image[fg] // 32).astype(int)
        if not len(q):
            raise ValueError(f"{sample_id}: nothing stands out from the background to rewrite")
        codes = q[:, 0] * 64 + q[:, 1] * 8 + q[:, 2]
        top = np.bincount(codes).argmax()
        mask = fg & ((image // 32).astype(int) @ np.array([64, 8, 1]) == top)
        ys, xs = np.nonzero(mask)
        out = image.copy()
        shade = image[mask].astype(float).mean(-1, keepdims=True) / 255
        out[mask] = np.clip(np.array(COLOURS[colour]) * (0.6 + 0.8 * shade), 0, 255).astype(np.uint8)
        return out, (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)


def semantic_entity_rewrite(item: ImageItem, ctx: OpContext, editor: RewriteEditor | None = None) -> Polluted:
    editor = editor or LocalRecolour()
    colour = list(COLOURS)[int(ctx.rng(item.qid, "rewrite").integers(len(COLOURS)))]
    instruction = (f"Edit this image of {item.subject}: make the main depicted object {colour}, as if it were a "
                   f"different entity; change nothing else.")
    image, box = editor.edit(item.image, instruction, item.qid)
    return Polluted("semantic_entity_rewrite", image, item.alt_text, item.title, editor.name, prompt=instruction,
                    rationale=f"semantic_entity_rewrite | subject: {item.subject[:40]}",
                    params={"editor": editor.name, "box": list(box)})
