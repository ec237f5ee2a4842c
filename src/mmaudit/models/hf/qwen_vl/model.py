"""Qwen-VL-Chat's language model (Qwen-7B) with the vision tower inside, as a transformers model.

Written from the Qwen and Qwen-VL papers and the released checkpoint's configuration and parameter names
(``transformer.wte``, ``transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.w1, mlp.w2, mlp.c_proj}``,
``transformer.ln_f``, ``transformer.visual.*``, ``lm_head``):

* RMSNorm (computed in float32, the weight applied after casting back);
* attention: one biased fused projection ``c_attn`` giving q, k and v as three blocks; rotary positions on the
  whole head (``rotary_pct`` 1) with the halves rotated (not interleaved), base ``rotary_emb_base``; scores
  divided by sqrt(head size); beyond ``seq_length`` tokens, dynamic NTK scaling of the rotary base and log-n
  scaling of the queries, as the release does (both are exactly 1 up to ``seq_length``);
* MLP: ``c_proj(w1(x) * silu(w2(x)))``, each of width ``intermediate_size / 2``;
* the image: the model is given the pixels (``pixel_values``, already resized and normalised), not a file path;
  the 256 positions between each ``<img>`` and ``</img>`` token take the resampler's output, which is what the
  release writes there after reading the image file named by the ids in between.

Positions count from the first token of the batch row (left padding included), as the release's do; rotary
attention depends only on distances, so a padded row answers as it would alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from mmaudit.models.hf.qwen_vl.config import QWenVLConfig
from mmaudit.models.hf.qwen_vl.visual import VisionTransformer


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rotary(nn.Module):
    """cos and sin per position; the NTK factor is fixed by the prompt's length and kept for its decoding steps."""

    def __init__(self, dim: int, base: float) -> None:
        super().__init__()
        self.dim, self.base, self.ntk_alpha = dim, base, 1.0

    def forward(self, positions: torch.Tensor, ntk_alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        base = self.base * ntk_alpha ** (self.dim / (self.dim - 2))
        inv = 1.0 / base ** (torch.arange(0, self.dim, 2, device=positions.device).float() / self.dim)
        freqs = torch.outer(positions.float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, config: QWenVLConfig, index: int) -> None:
        super().__init__()
        self.index, self.heads = index, config.num_attention_heads
        self.head_dim = config.kv_channels
        width = self.heads * self.head_dim
        self.c_attn = nn.Linear(config.hidden_size, 3 * width, bias=True)
        self.c_proj = nn.Linear(width, config.hidden_size, bias=not config.no_bias)
        self.scale = config.scale_attn_weights
        self.rot_dim = int(self.head_dim * config.rotary_pct)

    def forward(self, x, cos, sin, mask, logn, cache, want_weights: bool):
        b, n, _ = x.shape
        q, k, v = (t.view(b, n, self.heads, self.head_dim).transpose(1, 2)
                   for t in self.c_attn(x).split(self.heads * self.head_dim, dim=-1))

        def rope(t):
            r, rest = t[..., : self.rot_dim].float(), t[..., self.rot_dim :].float()
            return torch.cat((r * cos + rotate_half(r) * sin, rest), dim=-1).type_as(t)

        q, k = rope(q), rope(k)
        if cache is not None:
            k, v = cache.update(k, v, self.index)
        if logn is not None:
            q = q * logn.to(q.dtype)
        scores = q @ k.transpose(-1, -2)
        if self.scale:
            scores = scores / math.sqrt(v.shape[-1])
        probs = (scores + mask).softmax(-1).type(v.dtype)
        out = (probs @ v).transpose(1, 2).reshape(b, n, -1)
        return self.c_proj(out), (probs if want_weights else None)


class MLP(nn.Module):
    def __init__(self, config: QWenVLConfig) -> None:
        super().__init__()
        inner, bias = config.intermediate_size // 2, not config.no_bias
        self.w1 = nn.Linear(config.hidden_size, inner, bias=bias)
        self.w2 = nn.Linear(config.hidden_size, inner, bias=bias)
        self.c_proj = nn.Linear(inner, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.w1(x) * F.silu(self.w2(x)))


class Block(nn.Module):
    def __init__(self, config: QWenVLConfig, index: int) -> None:
        super().__init__()
        self.ln_1 = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.attn = Attention(config, index)
        self.ln_2 = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.mlp = MLP(config)
        self.weights: torch.Tensor | None = None  # the last call's attention, when asked for

    def forward(self, x, cos, sin, mask, logn, cache, want_weights: bool = False) -> torch.Tensor:
        h, self.weights = self.attn(self.ln_1(x), cos, sin, mask, logn, cache, want_weights)
        x = x + h
        return x + self.mlp(self.ln_2(x))


class QWenModel(nn.Module):
    def __init__(self, config: QWenVLConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.drop = nn.Dropout(config.emb_dropout_prob)
        self.rotary_emb = Rotary(int(config.kv_channels * config.rotary_pct), config.rotary_emb_base)
        self.h = nn.ModuleList(Block(config, i) for i in range(config.num_hidden_layers))
        self.ln_f = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.visual = VisionTransformer(**config.visual)

    def place_images(self, input_ids: torch.Tensor, embeds: torch.Tensor, pixel_values: torch.Tensor):
        """The resampler's output written over the positions between each ``<img>`` and ``</img>``, images in
        the order they appear (row by row)."""
        start = self.config.image_start_id
        rows, opens = torch.nonzero(input_ids == start, as_tuple=True)
        _, closes = torch.nonzero(input_ids == start + 1, as_tuple=True)
        if len(opens) != len(pixel_values) or len(closes) != len(opens):
            raise ValueError(f"{len(pixel_values)} images for {len(opens)} <img> spans ({len(closes)} closed)")
        feats = self.visual(pixel_values).to(embeds.dtype)
        embeds = embeds.clone()
        for k, (row, a, e) in enumerate(zip(rows.tolist(), opens.tolist(), closes.tolist())):
            if e - a - 1 != feats.shape[1]:
                raise ValueError(f"an <img> span of {e - a - 1} positions; the resampler gives {feats.shape[1]}")
            embeds[row, a + 1 : e] = feats[k]
        return embeds

    def forward(self, input_ids, attention_mask=None, pixel_values=None, cache=None, want_weights=False):
        b, n = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        x = self.drop(self.wte(input_ids))
        if pixel_values is not None and past == 0:
            x = self.place_images(input_ids, x, pixel_values)
        total = past + n
        if past == 0:  # the prompt fixes the NTK factor for the decoding steps after it
            context = math.log(total / self.config.seq_length, 2) + 1
            self.rotary_emb.ntk_alpha = max(2 ** math.ceil(context) - 1, 1) if self.config.use_dynamic_ntk else 1
        positions = torch.arange(past, total, device=x.device)
        cos, sin = self.rotary_emb(positions, self.rotary_emb.ntk_alpha)
        logn = None
        if self.config.use_logn_attn and not self.training and total > self.config.seq_length:
            p = positions.float() + 1
            logn = torch.where(p > self.config.seq_length, torch.log(p) / math.log(self.config.seq_length),
                               torch.ones_like(p))[None, None, :, None]
        keep = torch.ones(b, total, dtype=torch.bool, device=x.device) if attention_mask is None else \
            attention_mask[:, -total:].bool()
        causal = torch.ones(n, total, dtype=torch.bool, device=x.device).tril(past)
        allowed = causal[None, None] & keep[:, None, None, :]
        mask = torch.zeros(allowed.shape, dtype=torch.float32, device=x.device)
        mask = mask.masked_fill(~allowed, torch.finfo(torch.float32).min)
        for block in self.h:
            x = block(x, cos, sin, mask, logn, cache, want_weights)
        return self.ln_f(x)


class QWenLMHeadModel(PreTrainedModel, GenerationMixin):
    """The release's ``QWenLMHeadModel`` (``transformer`` + ``lm_head``), pixels in."""

    config_class = QWenVLConfig
    base_model_prefix = "transformer"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    _supports_sdpa = False

    def __init__(self, config: QWenVLConfig) -> None:
        super().__init__(config)
        self.transformer = QWenModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)

    def get_input_embeddings(self) -> nn.Module:
        return self.transformer.wte

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, pixel_values=None, cache=None, use_cache=None,
                output_attentions=False, logits_to_keep: int = 0, **kwargs):
        cache = cache if cache is not None else kwargs.get("past_key_values")
        if use_cache and cache is None:
            cache = DynamicCache()
        h = self.transformer(input_ids, attention_mask, pixel_values, cache, bool(output_attentions))
        logits = self.lm_head(h[:, -logits_to_keep:] if logits_to_keep else h)
        attentions = tuple(block.weights for block in self.transformer.h) if output_attentions else None
        return CausalLMOutputWithPast(logits=logits, cache=cache, attentions=attentions)

    def prepare_inputs_for_generation(self, input_ids, cache=None, attention_mask=None, pixel_values=None,
                                      **kwargs):
        """The whole prompt (with the pixels) first, then one new token at a time against the cache."""
        cache = cache if cache is not None else kwargs.get("past_key_values")
        past = cache.get_seq_length() if cache is not None else 0
        return {"input_ids": input_ids[:, past:], "attention_mask": attention_mask, "use_cache": True,
                "cache": cache, "pixel_values": pixel_values if past == 0 else None}
