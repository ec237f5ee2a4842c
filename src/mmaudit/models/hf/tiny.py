"""Tiny random-weight Hugging Face VLMs built offline from transformers' config classes.

They exercise the real model code (rope, mergers, image-token bookkeeping) with
no download, for tests and for `mmaudit audit --model <dir>` smoke runs.
"""

from __future__ import annotations

from pathlib import Path

import torch

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789?:.,!'\n -")


def char_tokenizer():
    """A character-level fast tokenizer carrying Qwen's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    return tok


def tiny_qwen2_5_vl(seed: int = 0):
    """(model, tokenizer, image_processor) of a ~0.2M-parameter Qwen2.5-VL."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = char_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    cfg = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           fullatt_block_indexes=[1], window_size=56),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.bos_token_id = ids["<|endoftext|>"]
    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 16)
    return model, tok, image_processor


def save_tiny_qwen2_5_vl(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny Qwen2.5-VL checkpoint in the usual HF layout."""
    path = Path(path)
    model, tok, ip = tiny_qwen2_5_vl(seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    ip.save_pretrained(path)
    return path
