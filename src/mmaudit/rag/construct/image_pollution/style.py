"""Neural style transfer (Gatys et al.): keep the original's content features, take the donor's Gram matrices.

Optimised at ``max_side`` pixels (CPU cost); the change is then upsampled and
added to the full-resolution original, so sharp original detail survives.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mmaudit.rag.construct.image_pollution.base import ImageItem, OpContext, Polluted, resize_to
from mmaudit.rag.construct.image_pollution.encoders import StyleFeatures, random_features


def gram(f: torch.Tensor) -> torch.Tensor:
    b, c, h, w = f.shape
    f = f.reshape(b, c, h * w)
    return f @ f.transpose(1, 2) / (c * h * w)


def style_distance(net: StyleFeatures, x: torch.Tensor, style: list[torch.Tensor]) -> torch.Tensor:
    feats, _ = net(x)
    return sum(F.mse_loss(gram(a), b) for a, b in zip(feats, style))


def neural_style_transfer(item: ImageItem, ctx: OpContext, net: StyleFeatures | None = None, steps: int = 80,
                          style_weight: float = 1e4, lr: float = 0.03, max_side: int = 160) -> Polluted:
    net = net or random_features(ctx.seed)
    donor = ctx.donor_for(item, "style")
    h, w = item.image.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    small = (max(8, round(h * scale)), max(8, round(w * scale)))
    full = torch.from_numpy(item.image.copy()).permute(2, 0, 1)[None].float() / 255
    x = F.interpolate(full, size=small, mode="bilinear", align_corners=False, antialias=True)
    d = torch.from_numpy(resize_to(donor.image, small)).permute(2, 0, 1)[None].float() / 255
    with torch.no_grad():
        style = [gram(f) for f in net(d)[0]]
        content = net(x)[1]
        before = float(style_distance(net, x, style))
    img = x.clone().requires_grad_(True)
    opt = torch.optim.Adam([img], lr=lr)
    for _ in range(steps):
        feats, cont = net(img.clamp(0, 1))
        loss = style_weight * sum(F.mse_loss(gram(a), b) for a, b in zip(feats, style)) + F.mse_loss(cont, content)
        opt.zero_grad()
        loss.backward()
        opt.step()
    delta = F.interpolate(img.detach().clamp(0, 1) - x, size=(h, w), mode="bilinear", align_corners=False)
    out = ((full + delta).clamp(0, 1)[0].permute(1, 2, 0) * 255).round().byte().numpy()
    with torch.no_grad():
        back = F.interpolate(torch.from_numpy(out).permute(2, 0, 1)[None].float() / 255, size=small,
                             mode="bilinear", align_corners=False, antialias=True)
        after = float(style_distance(net, back, style))
    change = float(np.abs(out.astype(int) - item.image.astype(int)).mean())
    return Polluted("neural_style_transfer", out, item.alt_text, item.title, f"gatys:{net.name}",
                    prompt=f"style of: {donor.subject}", donor_qid=donor.qid,
                    rationale=f"neural_style_transfer | subject: {item.subject[:40]}",
                    params={"steps": steps, "style_weight": style_weight, "lr": lr, "encoder": net.name,
                            "max_side": max_side,
                            "style_distance_before": before, "style_distance_after": after,
                            "mean_abs_change": change})
