"""The release's ``config.json`` as a transformers config: the same field names, so a released checkpoint folder
loads as it is. ``model_type`` is the release's ``qwen``; the vision settings stay the release's ``visual`` dict."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import PretrainedConfig

RELEASED_VISUAL = {"heads": 16, "image_size": 448, "image_start_id": 151857, "layers": 48, "mlp_ratio": 4.9231,
                   "output_dim": 4096, "patch_size": 14, "width": 1664}


class QWenVLConfig(PretrainedConfig):
    """Qwen-VL-Chat's settings; the defaults are the released checkpoint's."""

    model_type = "qwen"

    def __init__(self, vocab_size: int = 151936, hidden_size: int = 4096, num_hidden_layers: int = 32,
                 num_attention_heads: int = 32, emb_dropout_prob: float = 0.0, attn_dropout_prob: float = 0.0,
                 layer_norm_epsilon: float = 1e-6, initializer_range: float = 0.02,
                 max_position_embeddings: int = 8192, scale_attn_weights: bool = True, use_cache: bool = True,
                 kv_channels: int = 128, rotary_pct: float = 1.0, rotary_emb_base: float = 10000,
                 use_dynamic_ntk: bool = True, use_logn_attn: bool = True, intermediate_size: int = 22016,
                 no_bias: bool = True, seq_length: int = 2048, tie_word_embeddings: bool = False,
                 visual: dict | None = None, **kwargs) -> None:
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.emb_dropout_prob, self.attn_dropout_prob = emb_dropout_prob, attn_dropout_prob
        self.layer_norm_epsilon, self.initializer_range = layer_norm_epsilon, initializer_range
        self.max_position_embeddings, self.scale_attn_weights = max_position_embeddings, scale_attn_weights
        self.use_cache, self.kv_channels, self.rotary_pct = use_cache, kv_channels, rotary_pct
        self.rotary_emb_base, self.use_dynamic_ntk, self.use_logn_attn = rotary_emb_base, use_dynamic_ntk, use_logn_attn
        self.intermediate_size, self.no_bias, self.seq_length = intermediate_size, no_bias, seq_length
        self.visual = dict(RELEASED_VISUAL if visual is None else visual)
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @property
    def vision_config(self) -> SimpleNamespace:
        """The vision tower's width and grid under the names other families' configs use."""
        v = self.visual
        return SimpleNamespace(hidden_size=v["width"], image_size=v["image_size"], patch_size=v["patch_size"])

    @property
    def image_start_id(self) -> int:
        return int(self.visual["image_start_id"])
