"""Qwen-VL's vision side: an OpenCLIP ViT (ViT-bigG/14 at 448 px in the release) and the one-layer cross-attention
resampler that turns its patches into 256 positions for the language model.

Written from the Qwen-VL paper and the released checkpoint's parameter names and shapes
(``transformer.visual.*``), so its safetensors load as they are:

* patches by a bias-free convolution; a learned absolute position table of 256 rows, bicubically resized to the
  patch grid (32 x 32 at 448 px); LayerNorms with eps 1e-6 throughout;
* each block: pre-norm self-attention whose fused ``in_proj`` lays out q, k and v *per head*
  ([q_h, k_h, v_h] for head h, not three blocks), then a GELU MLP (``c_fc``, ``c_proj``);
* the resampler: 256 learned queries (plus a fixed 2D sine-cosine table, ``pos_embed``) attend once to the
  projected, normalised patches (plus the same table resized to the patch grid) with torch's
  ``nn.MultiheadAttention``; then ``ln_post`` and the square projection ``proj``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-6


def resized_positions(table: torch.Tensor, n: int) -> torch.Tensor:
    """A square position table (L, C) resized bicubically to n positions (a square grid), as the release does."""
    src, tgt = int(math.sqrt(table.shape[0])), int(math.sqrt(n))
    if src == tgt:
        return table
    grid = table.float().reshape(1, src, src, -1).permute(0, 3, 1, 2)
    out = F.interpolate(grid, size=(tgt, tgt), mode="bicubic", align_corners=False)
    return out.permute(0, 2, 3, 1).flatten(0, 2).to(table.dtype)


def sincos_2d(dim: int, grid: int) -> torch.Tensor:
    """MAE's fixed 2D sine-cosine table (grid * grid, dim): half the channels for rows, half for columns."""
    def one(d: int, pos: np.ndarray) -> np.ndarray:
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2))
        out = np.outer(pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    w, h = np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32))
    return torch.from_numpy(np.concatenate([one(dim // 2, w), one(dim // 2, h)], axis=1)).float()


class HeadwiseAttention(nn.Module):
    """Self-attention with the release's per-head fused projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        d = w // self.heads
        q, k, v = self.in_proj(x).view(b, n, self.heads, 3 * d).permute(0, 2, 1, 3).split(d, dim=-1)
        probs = (q / math.sqrt(d)) @ k.transpose(-1, -2)
        out = probs.softmax(-1) @ v  # (b, heads, n, d)
        return self.out_proj(out.permute(0, 2, 1, 3).reshape(b, n, w))


class BlockMLP(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width, eps=EPS), nn.LayerNorm(width, eps=EPS)
        self.attn = HeadwiseAttention(width, heads)
        self.mlp = BlockMLP(width, int(width * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Blocks(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(Block(width, heads, mlp_ratio) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x)
        return x


class Resampler(nn.Module):
    """256 learned queries attend once to the patches (Qwen-VL's position-aware adapter)."""

    def __init__(self, queries: int, dim: int, kv_dim: int) -> None:
        super().__init__()
        grid = int(math.sqrt(queries))
        self.pos_embed = nn.Parameter(sincos_2d(dim, grid), requires_grad=False)
        self.query = nn.Parameter(torch.zeros(queries, dim))
        self.kv_proj = nn.Linear(kv_dim, dim, bias=False) if kv_dim != dim else nn.Identity()
        self.attn = nn.MultiheadAttention(dim, dim // 128)  # the release: one head per 128 channels
        self.ln_q, self.ln_kv = nn.LayerNorm(dim, eps=EPS), nn.LayerNorm(dim, eps=EPS)

    def forward(self, x: torch.Tensor, weights: bool = False):
        """(B, patches, kv_dim) -> (B, queries, dim); with ``weights``, also the query -> patch attention (B, Q, P),
        averaged over heads."""
        pos = resized_positions(self.pos_embed, x.shape[1])
        kv = self.ln_kv(self.kv_proj(x)).permute(1, 0, 2)  # (P, B, dim): torch's sequence-first layout
        q = (self.ln_q(self.query) + self.pos_embed)[:, None].expand(-1, x.shape[0], -1)
        out, att = self.attn(q, kv + pos[:, None], kv, need_weights=weights)
        return (out.permute(1, 0, 2), att) if weights else out.permute(1, 0, 2)


class VisionTransformer(nn.Module):
    """``transformer.visual`` of the release: pixels (B, 3, S, S), normalised, -> (B, 256, output_dim)."""

    def __init__(self, image_size: int, patch_size: int, width: int, layers: int, heads: int, mlp_ratio: float,
                 output_dim: int, n_queries: int = 256, **_unused) -> None:
        super().__init__()
        self.grid = image_size // patch_size
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        self.positional_embedding = nn.Parameter(width**-0.5 * torch.randn(256, width))
        self.ln_pre = nn.LayerNorm(width, eps=EPS)
        self.transformer = Blocks(width, layers, heads, mlp_ratio)
        self.attn_pool = Resampler(n_queries, output_dim, width)
        self.ln_post = nn.LayerNorm(output_dim, eps=EPS)
        self.proj = nn.Parameter(output_dim**-0.5 * torch.randn(output_dim, output_dim))

    def patches(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The ViT's own output, one row per patch (B, grid^2, width): Vis-PGD's encoder features."""
        x = self.conv1(pixel_values.to(self.conv1.weight.dtype)).flatten(2).transpose(1, 2)
        x = x + resized_positions(self.positional_embedding, x.shape[1]).to(x.dtype)
        return self.transformer(self.ln_pre(x))

    def forward(self, pixel_values: torch.Tensor, weights: bool = False):
        x = self.patches(pixel_values)
        pooled = self.attn_pool(x, weights)
        out, att = pooled if weights else (pooled, None)
        out = self.ln_post(out) @ self.proj
        return (out, att) if weights else out
