"""Qwen2.5-VL's windowed vision attention in a handful of batched kernel calls instead of one per window.

Without flash attention, transformers runs the tower's attention once per window per image per layer (each a
separate small SDPA call: 7,268 of them per PGD step at batch 16, 448 px). Windows of one length are independent
problems of one shape, so they are stacked and sent through SDPA together: one call per distinct window length
(edge windows are shorter; a few lengths per image), with the same softmax scale and no mask, hence the same
numbers up to summation order. Flash-attention models keep transformers' own variable-length path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmaudit.errors import MMAuditError


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """Attention within each [cu[i], cu[i+1]) span of (heads, S, d) tensors, batched by span length; (S, heads, d)."""
    bounds = cu_seqlens.tolist()
    spans: dict[int, list[int]] = {}
    for i in range(len(bounds) - 1):
        spans.setdefault(bounds[i + 1] - bounds[i], []).append(bounds[i])
    order, parts = [], []
    for length, starts in spans.items():
        if length == 0:
            continue
        index = (torch.tensor(starts, device=q.device)[:, None] + torch.arange(length, device=q.device)).flatten()
        pick = [t[:, index].unflatten(1, (len(starts), length)).transpose(0, 1) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*pick, scale=scale)  # (n, heads, length, d)
        parts.append(out.transpose(1, 2).flatten(0, 1))  # (n * length, heads, d)
        order.append(index)
    position = torch.cat(order)
    inverse = torch.empty_like(position)
    inverse[position] = torch.arange(len(position), device=position.device)
    return torch.cat(parts)[inverse]


def batch_windows(model) -> int:
    """Route every Qwen2.5-VL vision attention of ``model`` through :func:`grouped_attention` (not under flash
    attention); returns how many modules were patched."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen

    if "flash" in str(model.config._attn_implementation):
        return 0
    patched = 0
    for module in model.modules():
        if type(module).__name__ == "Qwen2_5_VLVisionAttention":
            module.forward = _forward(module, qwen.apply_rotary_pos_emb_vision)
            patched += 1
    return patched


def _forward(module, rotary):
    def forward(hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
        if position_embeddings is None:
            raise MMAuditError("Qwen2.5-VL vision attention needs its rotary position embeddings")
        n = hidden_states.shape[0]
        q, k, v = module.qkv(hidden_states).reshape(n, 3, module.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        q, k = rotary(q, k, *position_embeddings)
        out = grouped_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), cu_seqlens, module.scaling)
        return module.proj(out.reshape(n, -1).contiguous())

    return forward
