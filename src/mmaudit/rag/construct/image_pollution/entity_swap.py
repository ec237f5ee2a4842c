"""Entity swap: the image of another question under this question's caption (subject-image mismatch)."""

from __future__ import annotations

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted


def entity_swap(item: ImageItem, ctx: OpContext) -> Polluted:
    donor = ctx.donor_for(item, "entity_swap")
    return Polluted("entity_swap", donor.image.copy(), item.alt_text, item.title, "image_swap", donor_qid=donor.qid,
                    rationale=f"entity_swap | subject: {item.subject[:40]}",
                    params={"donor_image_url": donor.image_url})
