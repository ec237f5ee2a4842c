"""Caption flip: a false caption, the original pixels untouched (metadata-only attack)."""

from __future__ import annotations

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted


def caption_flip(item: ImageItem, ctx: OpContext) -> Polluted:
    if not ctx.false_caption:
        raise ValueError(f"question {item.qid}: no false caption to flip to")
    return Polluted("caption_flip", item.image.copy(), ctx.false_caption, item.title, "caption_rewrite",
                    prompt=f"subject:{item.subject[:50]}", rationale=f"caption_flip | subject: {item.subject[:40]}",
                    params={"original_alt": item.alt_text})
