"""Image blend: a donor image composited into the original (cross-question contamination)."""

from __future__ import annotations

import numpy as np

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted, resize_to


def image_blend(item: ImageItem, ctx: OpContext, alpha: float = 0.4) -> Polluted:
    donor = ctx.donor_for(item, "image_blend")
    d = resize_to(donor.image, item.image.shape[:2]).astype(np.float32)
    out = np.clip((1 - alpha) * item.image.astype(np.float32) + alpha * d + 0.5, 0, 255).astype(np.uint8)
    return Polluted("image_blend", out, item.alt_text, item.title, "pil_blend", prompt=donor.subject,
                    donor_qid=donor.qid, rationale=f"image_blend | subject: {item.subject[:40]}",
                    params={"alpha": alpha, "donor_cue": donor.subject})
