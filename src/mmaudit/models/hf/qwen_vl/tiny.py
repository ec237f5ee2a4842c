"""A tiny random-weight Qwen-VL-Chat checkpoint in the released layout, written offline and loaded back.

The folder holds what the release's holds, by the release's names: ``config.json`` (its field names, its
``architectures`` and ``auto_map``), the weights as safetensors under its parameter names, ``qwen.tiktoken`` (here
the 256 single bytes at their byte values, so every id is checkable by hand, and the release's special tokens
after them) and ``generation_config.json`` with its ChatML settings.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from mmaudit.models.hf.qwen_vl.tokenizer import SPECIALS, VOCAB_FILE, write_ranks

BYTES = {bytes([i]): i for i in range(256)}
IMAGE_START = len(BYTES) + SPECIALS.index("<img>")  # 470: where the release's numbering puts <img>
AUTO_MAP = {"AutoConfig": "configuration_qwen.QWenConfig", "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"}


def tiny_config(**overrides):
    from mmaudit.models.hf.qwen_vl.config import QWenVLConfig

    visual = {"heads": 2, "image_size": 56, "image_start_id": IMAGE_START, "layers": 2, "mlp_ratio": 2.0,
              "output_dim": 128, "patch_size": 14, "width": 64}
    fields = dict(vocab_size=512, hidden_size=128, num_hidden_layers=3, num_attention_heads=4, kv_channels=32,
                  intermediate_size=256, seq_length=2048, max_position_embeddings=2048, visual=visual)
    return QWenVLConfig(**(fields | overrides))


def save_tiny_qwen_vl(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny checkpoint folder; returns it."""
    from mmaudit.models.hf.qwen_vl.model import QWenLMHeadModel

    path = Path(path)
    torch.manual_seed(seed)
    cfg = tiny_config()
    cfg.auto_map = AUTO_MAP
    model = QWenLMHeadModel(cfg).eval()
    with torch.no_grad():  # a random model needs distinct resampler queries and a readable image to tell apart
        model.transformer.visual.attn_pool.query.normal_(0, 0.5)
    model.generation_config.update(chat_format="chatml", eos_token_id=len(BYTES), pad_token_id=len(BYTES),
                                   max_window_size=6144, do_sample=False)
    model.save_pretrained(path, safe_serialization=True)
    write_ranks(path / VOCAB_FILE, BYTES)
    (path / "tokenizer_config.json").write_text(json.dumps({
        "model_max_length": 8192, "tokenizer_class": "QWenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_qwen.QWenTokenizer", None]}}, indent=2))
    return path


def tiny_qwen_vl(seed: int = 0):
    """(model, tokenizer, image processor) of the tiny checkpoint, loaded the way ``load_hf`` loads a release."""
    from mmaudit.models.hf.qwen_vl_chat import QwenVLChatAdapter

    folder = save_tiny_qwen_vl(Path(tempfile.mkdtemp(prefix="tiny-qwen-vl-")), seed)
    return QwenVLChatAdapter.load_parts(folder, dtype="float32")
