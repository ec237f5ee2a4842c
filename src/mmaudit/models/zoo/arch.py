"""Tiny VLM architectures of the zoo, one per fusion level of the FusionAudit taxonomy.

All levels share the glyph encoder (a CNN pretrained to classify what every
grid cell holds), the tokenizer and the decoder shape; they differ only in how
vision enters the language computation:

* L1: the encoder is frozen; a connector maps its output to a visual prefix.
* L2: encoder and decoder train jointly; the prefix enters the first layer only.
* L3: as L2, plus DeepStack re-injection: projections of intermediate encoder
  features are added to the visual positions after several decoder layers
  (the same place Qwen3-VL adds them).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mmaudit.data.render import CELL_CLASSES, GRID, MAX_ORDER, OWNERS, STYLES
from mmaudit.models.levels import LEVELS


@dataclass
class ZooConfig:
    level: str = "L2"
    vocab_size: int = 0
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 384
    max_text: int = 40
    enc_channels: tuple[int, int, int, int] = (32, 64, 96, 128)
    deepstack_after: tuple[int, ...] = (0, 1, 2)
    n_classes: int = len(CELL_CLASSES)
    n_styles: int = len(STYLES)
    n_owners: int = len(OWNERS)
    n_orders: int = MAX_ORDER + 1
    grid: int = GRID
    emb_std: float = 0.1  # linears keep PyTorch's fan-in init; 0.02 (GPT-2's) starved d=128 of signal
    class_tokens: list[list[int]] = field(default_factory=list)
    owner_tokens: list[list[int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ZooConfig:
        d = dict(d)
        d["enc_channels"] = tuple(d["enc_channels"])
        d["deepstack_after"] = tuple(d["deepstack_after"])
        return cls(**d)


class GlyphEncoder(nn.Module):
    """CNN from raw [0, 1] RGB to one feature vector per grid cell, with dense heads."""

    def __init__(self, cfg: ZooConfig) -> None:
        super().__init__()
        c0, c1, c2, c3 = cfg.enc_channels
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.s1 = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.s2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.s3 = nn.Conv2d(c2, c3, 3, stride=2, padding=1)
        self.s4 = nn.Conv2d(c3, c3, 3, padding=1)
        # Row mixer: every cell sees its whole row, so it can tell which label or field owns it.
        self.row_mix = nn.Conv2d(c3, c3 // 2, (1, 2 * cfg.grid - 1), padding=(0, cfg.grid - 1))
        self.row_out = nn.Conv2d(c3 // 2, c3, 1)
        self.cls_head = nn.Conv2d(c3, cfg.n_classes, 1)
        self.style_head = nn.Conv2d(c3, cfg.n_styles, 1)
        self.owner_head = nn.Conv2d(c3, cfg.n_owners, 1)
        self.order_head = nn.Conv2d(c3, cfg.n_orders, 1)
        self.grid = cfg.grid

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        x = (images - 0.5) / 0.25  # normalisation lives inside, so gradients reach raw pixels
        x = F.gelu(self.stem(x))
        x = F.gelu(self.s1(x))
        mid = F.gelu(self.s2(x))
        x = F.gelu(self.s3(mid))
        feat = F.gelu(self.s4(x)) + x
        feat = feat + self.row_out(F.gelu(self.row_mix(feat)))
        flat = lambda t: t.flatten(2).transpose(1, 2)  # noqa: E731  (B, C, g, g) -> (B, g*g, C)
        return {
            "features": flat(feat),
            "mid": flat(F.adaptive_avg_pool2d(mid, self.grid)),
            "class_logits": flat(self.cls_head(feat)),
            "style_logits": flat(self.style_head(feat)),
            "owner_logits": flat(self.owner_head(feat)),
            "order_logits": flat(self.order_head(feat)),
        }


class Block(nn.Module):
    """Pre-norm decoder block; can keep its attention weights for OAR."""

    def __init__(self, cfg: ZooConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.keep_attention = False
        self.attention: torch.Tensor | None = None

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.keep_attention:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            self.attention = weights.detach()
            out = weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = h + self.proj(out.transpose(1, 2).reshape(b, s, d))
        return h + self.mlp(self.ln2(h))


class ZooVLM(nn.Module):
    """Glyph encoder + connector + causal decoder; sequence = [visual prefix][text]."""

    def __init__(self, cfg: ZooConfig) -> None:
        super().__init__()
        if cfg.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {cfg.level!r}")
        self.cfg = cfg
        d = cfg.d_model
        n_vis = cfg.grid * cfg.grid
        self.encoder = GlyphEncoder(cfg)
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)
        self.vis_row = nn.Embedding(cfg.grid, d)
        self.vis_col = nn.Embedding(cfg.grid, d)
        self.txt_pos = nn.Embedding(cfg.max_text, d)
        self.connector = nn.Sequential(
            nn.Linear(cfg.enc_channels[3] + cfg.n_styles + cfg.n_orders, d), nn.GELU(), nn.Linear(d, d)
        )
        # Fixed maps from each dense class to the tokens that name it ("7" -> token 7,
        # "red circle" -> red + circle) and from each owner to its letter: the tied half
        # of the connector, so a question token and the glyph it names start out alike.
        self.register_buffer("class_to_tokens", self._token_map(cfg.class_tokens, cfg), persistent=False)
        self.register_buffer("owner_to_tokens", self._token_map(cfg.owner_tokens, cfg), persistent=False)
        self.owner_proj = nn.Linear(d, d, bias=False)
        self.deep = nn.ModuleList(
            nn.Linear(cfg.enc_channels[2], d) for _ in (cfg.deepstack_after if cfg.level == "L3" else ())
        )
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(d)
        rows = torch.arange(n_vis) // cfg.grid
        cols = torch.arange(n_vis) % cfg.grid
        self.register_buffer("vis_rows", rows, persistent=False)
        self.register_buffer("vis_cols", cols, persistent=False)
        for emb in (self.tok_emb, self.vis_row, self.vis_col, self.txt_pos):
            nn.init.normal_(emb.weight, std=cfg.emb_std)
        nn.init.eye_(self.owner_proj.weight)

    @staticmethod
    def _token_map(rows: list[list[int]], cfg: ZooConfig) -> torch.Tensor:
        m = torch.zeros(len(rows), cfg.vocab_size)
        for c, toks in enumerate(rows):
            for t in toks:
                m[c, t] = 1.0
        return m

    @property
    def n_visual(self) -> int:
        return self.cfg.grid * self.cfg.grid

    def visual_tokens(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        emb = self.tok_emb.weight
        glyph = enc["class_logits"].softmax(-1) @ (self.class_to_tokens @ emb)
        owner = self.owner_proj(enc["owner_logits"].softmax(-1) @ (self.owner_to_tokens @ emb))
        style, order = enc["style_logits"].softmax(-1), enc["order_logits"].softmax(-1)
        return self.connector(torch.cat([enc["features"], style, order], -1)) + glyph + owner

    def forward(
        self, images: torch.Tensor, text_ids: torch.Tensor, text_valid: torch.Tensor, enc: dict | None = None,
        shift: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits for every position; ``text_valid`` marks real (non-pad) text tokens; ``shift`` (B,) moves a
        row's text positions back by that many slots (extra left padding a longer prompt in the batch caused)."""
        enc = enc if enc is not None else self.encoder(images)
        b, t = text_ids.shape
        n_vis = self.n_visual
        vis = self.visual_tokens(enc) + self.vis_row(self.vis_rows) + self.vis_col(self.vis_cols)
        # Absolute slots of the left-padded text: a prompt always ends at the same position,
        # so "the token two before <sep>" is a fixed position.
        pos = torch.arange(t, device=text_ids.device)[None]
        if shift is not None:
            pos = pos - shift[:, None]
        pos = pos.clamp(0, self.cfg.max_text - 1)  # slots left of a shifted row are padding (masked)
        txt = self.tok_emb(text_ids) + self.txt_pos(pos)
        h = torch.cat([vis, txt], 1)
        s = n_vis + t
        valid = torch.cat([torch.ones(b, n_vis, dtype=torch.bool, device=h.device), text_valid], 1)
        causal = torch.ones(s, s, dtype=torch.bool, device=h.device).tril()
        mask = (causal[None] & valid[:, None, :])[:, None]  # (B, 1, S, S)
        deep = dict(zip(self.cfg.deepstack_after, self.deep)) if self.cfg.level == "L3" else {}
        for i, layer in enumerate(self.layers):
            h = layer(h, mask)
            if i in deep:
                h = torch.cat([h[:, :n_vis] + deep[i](enc["mid"]), h[:, n_vis:]], 1)
        return F.linear(self.ln_f(h), self.tok_emb.weight)

    @torch.no_grad()
    def generate_ids(
        self, images: torch.Tensor, q_ids: torch.Tensor, q_valid: torch.Tensor, max_new: int, eos: int,
        shift: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Greedy decoding of ``max_new`` tokens after left-padded prompts (batched)."""
        enc = self.encoder(images)
        ids, valid = q_ids, q_valid
        out = []
        done = torch.zeros(len(ids), dtype=torch.bool, device=ids.device)
        for _ in range(max_new):
            nxt = self(images, ids, valid, enc=enc, shift=shift)[:, -1].argmax(-1)
            out.append(nxt)
            done |= nxt == eos
            ids = torch.cat([ids, nxt[:, None]], 1)
            valid = torch.cat([valid, torch.ones_like(done)[:, None]], 1)
            if bool(done.all()):
                break
        return torch.stack(out, 1)
