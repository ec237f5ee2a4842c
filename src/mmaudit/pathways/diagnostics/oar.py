"""OAR, the overlay attention ratio.

Attention from the text tokens after the image to the image patches (the
adapter averages it over heads and the chosen later decoder layers), then
averaged over those text tokens; OAR is the share of that image-directed
attention that falls on the overlay's patches, divided by the share of patches
the overlay covers. OAR = 1 is attention spread evenly; OAR > 1 means the model
looks at the overlay more than its size warrants.

Choices the paper leaves open (parameters): which layers (default the later
half), and which patches belong to a region (any overlap by default,
``min_overlap``); the area share is counted in patches, so uniform attention
gives exactly 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mmaudit.models.vlm import PatchGrid


def oar(attention: torch.Tensor, region: Sequence[int]) -> float:
    """OAR of one (n_text_after_image, n_image_tokens) attention map for patch indices ``region``."""
    if not len(region):
        raise ValueError("the overlay region covers no image patch")
    a = attention.float().mean(0)
    total = float(a.sum())
    if total <= 0:
        return float("nan")
    share = float(a[list(region)].sum()) / total
    return share / (len(region) / a.numel())


def region_patches(grid: PatchGrid, box, n_tokens: int, min_overlap: float = 0.0) -> list[int]:
    """Patch indices of ``box``; checks that the grid describes the adapter's image tokens."""
    if grid.n_tokens != n_tokens:
        raise ValueError(f"patch grid of {grid.n_tokens} tokens does not match {n_tokens} image tokens")
    return grid.region_to_patches(box, min_overlap)


def attention_map(attention: torch.Tensor, grid: PatchGrid, height: int, width: int, side: int = 24) -> list[list]:
    """Where the image-directed attention falls, as a coarse map over the image (for the report's Figure 3
    heat map): each patch's share spread over its box, block-averaged to at most ``side`` cells a side, and
    scaled so that attention spread evenly reads 1 everywhere (the scale OAR uses)."""
    a = attention.float().mean(0)
    total = float(a.sum())
    dense = np.zeros((height, width))
    if total > 0:
        for i, share in enumerate((a / total).tolist()):
            x0, y0, x1, y1 = grid.patch_box(i)
            r0, r1 = int(np.floor(y0)), max(int(np.ceil(y1)), int(np.floor(y0)) + 1)
            c0, c1 = int(np.floor(x0)), max(int(np.ceil(x1)), int(np.floor(x0)) + 1)
            dense[r0:r1, c0:c1] += share / ((r1 - r0) * (c1 - c0))
    rows = max(1, min(side, height, round(side * height / max(height, width))))
    cols = max(1, min(side, width, round(side * width / max(height, width))))
    r_edges = np.linspace(0, height, rows + 1).astype(int)
    c_edges = np.linspace(0, width, cols + 1).astype(int)
    cells = np.array([[dense[r_edges[r]:r_edges[r + 1], c_edges[c]:c_edges[c + 1]].mean() for c in range(cols)]
                      for r in range(rows)])
    return np.round(cells * height * width, 3).tolist()
