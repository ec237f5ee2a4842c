"""Adversarial patch: a localised patch optimised to push an image encoder's features toward a false concept.

Only the pixels of a square patch (``size`` of the shorter side, at ``corner``)
may change, without an L-infinity budget (it is a patch, as in Brown et al.);
signed-gradient steps maximise the cosine similarity between the patched
image's features and the false target concept's. The result records the
similarity before and after.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted
from mmaudit.rag.construct.image_pollution.encoders import ConceptEncoder


def patch_box(h: int, w: int, size: float, corner: str) -> tuple[int, int, int, int]:
    s = max(4, int(min(h, w) * size))
    x0 = 0 if "left" in corner else w - s
    y0 = 0 if "top" in corner else h - s
    return x0, y0, x0 + s, y0 + s


def adversarial_patch(item: ImageItem, ctx: OpContext, encoder: ConceptEncoder, size: float = 0.3,
                      corner: str = "bottom-right", steps: int = 60, alpha: float = 8 / 255) -> Polluted:
    target_name = ctx.false_target or "UNKNOWN"
    x = torch.from_numpy(item.image.copy()).permute(2, 0, 1)[None].float() / 255
    h, w = x.shape[-2:]
    x0, y0, x1, y1 = patch_box(h, w, size, corner)
    mask = torch.zeros_like(x)
    mask[..., y0:y1, x0:x1] = 1
    target = F.normalize(encoder.concept(target_name).float(), dim=-1)

    def similarity(img: torch.Tensor) -> torch.Tensor:
        return F.normalize(encoder.images(img).float(), dim=-1) @ target

    g = ctx.rng(item.qid, "patch")
    adv = x.clone()
    adv[..., y0:y1, x0:x1] = torch.from_numpy(g.random((1, 3, y1 - y0, x1 - x0))).float()  # random start
    with torch.no_grad():
        before = float(similarity(x))
    for _ in range(steps):
        adv.requires_grad_(True)
        (grad,) = torch.autograd.grad(similarity(adv).sum(), adv)
        with torch.no_grad():
            adv = (adv + alpha * grad.sign() * mask).clamp(0, 1)
    out = (adv.detach()[0].permute(1, 2, 0) * 255).round().byte().numpy()
    out[:y0], out[y1:], out[:, :x0], out[:, x1:] = (item.image[:y0], item.image[y1:], item.image[:, :x0],
                                                    item.image[:, x1:])  # exactly the original outside
    with torch.no_grad():
        after = float(similarity(torch.from_numpy(out).permute(2, 0, 1)[None].float() / 255))
    return Polluted("adversarial_patch", out, item.alt_text, item.title, f"pgd_patch:{encoder.name}",
                    prompt=target_name, rationale=f"adversarial_patch | subject: {item.subject[:40]}",
                    params={"box": [x0, y0, x1, y1], "steps": steps, "alpha": alpha, "target": target_name,
                            "similarity_before": before, "similarity_after": after, "encoder": encoder.name})
