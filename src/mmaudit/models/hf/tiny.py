"""Tiny random-weight Hugging Face VLMs built offline from transformers' config classes.

They exercise the real model code (rope, mergers, image-token bookkeeping) with
no download, for tests and for `mmaudit audit --model <dir>` smoke runs. Each
tokenizer carries its family's prompt format as a chat template
(:mod:`mmaudit.models.hf.tiny_formats`) and adds a start token where the
family's tokenizer does, so prompts can be checked against the processors.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mmaudit.models.hf import tiny_formats

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
QWEN_NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "vision_bos_token": "<|vision_start|>",
              "vision_eos_token": "<|vision_end|>"}
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789?:.,!'\n -")


def char_tokenizer(specials: list[str] | None = None, eos: str = "<|im_end|>", pad: str = "<|endoftext|>",
                   bos: str | None = None, adds_bos: bool = False, template: str | None = None,
                   named: dict[str, str] | None = None, size: int | None = None):
    """A character-level fast tokenizer carrying the family's special tokens (Qwen's by default): ``bos`` its
    start token, prepended to every encoding when ``adds_bos`` (as Llama's and Gemma's tokenizers do);
    ``template`` its chat template; ``named`` special tokens the family's processor looks up by attribute
    (``image_token``, ``boi_token``, ...); ``size``: filled up with word tokens to a real vocabulary's size, so
    every id a full-size random model emits decodes to text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = specials or SPECIALS
    words = specials + CHARS
    vocab = {t: i for i, t in enumerate(words + [f" w{i}" for i in range(max(0, (size or 0) - len(words)))])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=pad))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    if bos and adds_bos:
        tk.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                          special_tokens=[(bos, vocab[bos])])
    extra = {"extra_special_tokens": named} if named else {}
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=eos, pad_token=pad, bos_token=bos, **extra)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = template
    return tok


def set_special_ids(model, eos: int, pad: int, bos: int | None = None) -> None:
    """Greedy generation of a random-weight model needs its stop and pad ids spelled out."""
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    if bos is not None:
        model.generation_config.bos_token_id = bos


LLAVA_SPECIALS = ["<pad>", "<s>", "</s>", "<image>"]
BLIP_SPECIALS = ["<pad>", "</s>", "<image>"]


def tiny_blip2(seed: int = 0):
    """A tiny BLIP-2: ViT 28 px / patch 14, a 2-layer Q-Former with 4 queries, an OPT decoder."""
    from transformers import Blip2Config, Blip2ForConditionalGeneration
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    tok = char_tokenizer(BLIP_SPECIALS, eos="</s>", pad="<pad>", bos="</s>", adds_bos=True)  # OPT's: "</s>" first
    ids = {t: tok.convert_tokens_to_ids(t) for t in BLIP_SPECIALS}
    cfg = Blip2Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=14, initializer_range=0.02),  # BLIP-2's default is 1e-10
        qformer_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            encoder_hidden_size=32, cross_attention_frequency=1, vocab_size=64),
        text_config=dict(model_type="opt", vocab_size=len(tok), hidden_size=64, ffn_dim=128, num_hidden_layers=3,
                         num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=512,
                         bos_token_id=ids["</s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"]),
        num_query_tokens=4, image_token_index=ids["<image>"],
    )
    torch.manual_seed(seed)
    model = Blip2ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # fresh query tokens are zeros; random weights need distinct queries
        model.query_tokens.normal_(0, 0.5)
    set_special_ids(model, ids["</s>"], ids["<pad>"], ids["</s>"])
    ip = BlipImageProcessorPil(size={"height": 28, "width": 28}, image_mean=[0.48145466, 0.4578275, 0.40821073],
                               image_std=[0.26862954, 0.26130258, 0.27577711])
    return model, tok, ip


def tiny_instructblip(seed: int = 0):
    """A tiny InstructBLIP: the tiny BLIP-2 tower and Q-Former (which also reads the instruction), a Llama decoder."""
    from transformers import InstructBlipConfig, InstructBlipForConditionalGeneration
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    tok = char_tokenizer(BLIP_SPECIALS, eos="</s>", pad="<pad>", bos="</s>", adds_bos=True)
    qtok = char_tokenizer(["[PAD]", "[CLS]", "[SEP]"], eos="[SEP]", pad="[PAD]")
    ids = {t: tok.convert_tokens_to_ids(t) for t in BLIP_SPECIALS}
    cfg = InstructBlipConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=14, initializer_range=0.02),
        qformer_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            encoder_hidden_size=32, cross_attention_frequency=1, vocab_size=128,
                            pad_token_id=qtok.pad_token_id),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=ids["</s>"], eos_token_id=ids["</s>"],
                         pad_token_id=ids["<pad>"]),
        num_query_tokens=4, image_token_index=ids["<image>"],
    )
    torch.manual_seed(seed)
    model = InstructBlipForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.query_tokens.normal_(0, 0.5)
    set_special_ids(model, ids["</s>"], ids["<pad>"], ids["</s>"])
    ip = BlipImageProcessorPil(size={"height": 28, "width": 28}, image_mean=[0.48145466, 0.4578275, 0.40821073],
                               image_std=[0.26862954, 0.26130258, 0.27577711])
    return model, tok, ip, qtok


SMOL_SPECIALS = ["<pad>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>",
                 "<image>"] + [f"<row_{r}_col_{c}>" for r in (1, 2, 3) for c in (1, 2, 3)]


def tiny_smolvlm(seed: int = 0):
    """A tiny SmolVLM: 28 px tiles (2 x 2 patches, pixel shuffle 2 -> 1 token per tile), longest edge 56."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    tok = char_tokenizer(SMOL_SPECIALS, eos="<end_of_utterance>", pad="<pad>", bos="<|im_start|>",
                         template=tiny_formats.SMOLVLM, named={"image_token": "<image>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in SMOL_SPECIALS}
    cfg = SmolVLMConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=14),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=ids["<|im_start|>"],
                         eos_token_id=ids["<end_of_utterance>"], pad_token_id=ids["<pad>"]),
        scale_factor=2, image_token_id=ids["<image>"], pad_token_id=ids["<pad>"],
    )
    torch.manual_seed(seed)
    model = SmolVLMForConditionalGeneration(cfg).eval()
    set_special_ids(model, ids["<end_of_utterance>"], ids["<pad>"])
    ip = SmolVLMImageProcessorPil(size={"longest_edge": 56}, max_image_size={"longest_edge": 28},
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model, tok, ip


GEMMA_SPECIALS = ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                  "<image_soft_token>"]
GEMMA_NAMED = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}


def tiny_gemma3(seed: int = 0):
    """A tiny Gemma 3: SigLIP tower at 56 px / patch 14 (4 x 4 patches) pooled to 2 x 2 soft tokens."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    tok = char_tokenizer(GEMMA_SPECIALS, eos="<end_of_turn>", pad="<pad>", bos="<bos>", adds_bos=True,
                         template=tiny_formats.GEMMA3, named=GEMMA_NAMED)
    ids = {t: tok.convert_tokens_to_ids(t) for t in GEMMA_SPECIALS}
    cfg = Gemma3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=56, patch_size=14, vision_use_head=False),
        text_config=dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         sliding_window=64, bos_token_id=ids["<bos>"], eos_token_id=ids["<end_of_turn>"],
                         pad_token_id=ids["<pad>"]),
        mm_tokens_per_image=4, boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # the projector starts at zero in a fresh Gemma 3; random weights need a live path
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0, 0.2)
    set_special_ids(model, ids["<end_of_turn>"], ids["<pad>"], ids["<bos>"])
    ip = Gemma3ImageProcessorPil(size={"height": 56, "width": 56}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return model, tok, ip


def tiny_llava(seed: int = 0):
    """(model, tokenizer, image_processor) of a tiny LLaVA-1.5 (CLIP tower 28 px / patch 14, Llama decoder)."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    tok = char_tokenizer(LLAVA_SPECIALS, eos="</s>", pad="<pad>", bos="<s>", adds_bos=True, template=tiny_formats.LLAVA,
                         named={"image_token": "<image>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in LLAVA_SPECIALS}
    cfg = LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=28, patch_size=14, projection_dim=32),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                         pad_token_id=ids["<pad>"]),
        image_token_id=ids["<image>"], vision_feature_layer=-2, vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg).eval()
    set_special_ids(model, ids["</s>"], ids["<pad>"], ids["<s>"])
    ip = LlavaImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28},
                                image_mean=[0.48145466, 0.4578275, 0.40821073],
                                image_std=[0.26862954, 0.26130258, 0.27577711])
    return model, tok, ip


def _qwen_common(tok, **text) -> dict:
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]} | text.pop("rope", {})
    return {
        "text_config": dict(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rope_parameters=rope,
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        ) | text,
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
    }


def tiny_qwen2_vl(seed: int = 0):
    """(model, tokenizer, image_processor) of a ~0.2M-parameter Qwen2-VL (same image path as Qwen2.5-VL)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tok = char_tokenizer(template=tiny_formats.QWEN2_VL, named=QWEN_NAMED)
    cfg = Qwen2VLConfig(vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
                        **_qwen_common(tok))
    torch.manual_seed(seed)
    return _finish(Qwen2VLForConditionalGeneration(cfg).eval(), tok)


def tiny_qwen2_5_vl(seed: int = 0):
    """(model, tokenizer, image_processor) of a ~0.2M-parameter Qwen2.5-VL."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = char_tokenizer(template=tiny_formats.QWEN2_VL, named=QWEN_NAMED)
    cfg = Qwen2_5_VLConfig(
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           fullatt_block_indexes=[1], window_size=56),
        **_qwen_common(tok),
    )
    torch.manual_seed(seed)
    return _finish(Qwen2_5_VLForConditionalGeneration(cfg).eval(), tok)


def tiny_qwen3_vl(seed: int = 0):
    """A tiny Qwen3-VL: patch 16, DeepStack re-injection of two vision layers into the decoder (L3)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tok = char_tokenizer(template=tiny_formats.QWEN3_VL, named=QWEN_NAMED)
    cfg = Qwen3VLConfig(vision_config=QWEN3_VISION | {"deepstack_visual_indexes": [0, 1]},
                        **_qwen_common(tok, head_dim=16, rope={"mrope_interleaved": True}))
    torch.manual_seed(seed)
    return _finish(Qwen3VLForConditionalGeneration(cfg).eval(), tok, patch=16)


def tiny_qwen3_5(seed: int = 0):
    """A tiny Qwen3.5: hybrid decoder (three linear-attention layers, then one softmax layer)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    tok = char_tokenizer(template=tiny_formats.QWEN3_VL, named=QWEN_NAMED)
    text = dict(num_hidden_layers=4, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_num_key_heads=2, linear_num_value_heads=4,
                rope={"mrope_interleaved": True, "partial_rotary_factor": 1.0})
    cfg = Qwen3_5Config(vision_config=QWEN3_VISION, **_qwen_common(tok, **text))
    torch.manual_seed(seed)
    return _finish(Qwen3_5ForConditionalGeneration(cfg).eval(), tok, patch=16)


QWEN3_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)


def _finish(model, tok, patch: int = 14):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    set_special_ids(model, ids["<|im_end|>"], ids["<|endoftext|>"], ids["<|endoftext|>"])
    f = patch * 2
    kwargs = {} if patch == 14 else {"patch_size": patch, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    image_processor = Qwen2VLImageProcessorPil(min_pixels=f * f * 4, max_pixels=f * f * 16, merge_size=2, **kwargs)
    return model, tok, image_processor


def save_tiny(path: str | Path, model_type: str = "qwen2_5_vl", seed: int = 0) -> Path:
    """Write the tiny test model the family registry declares for ``model_type`` as a checkpoint folder in the usual
    HF layout (a second tokenizer in its subfolder)."""
    from mmaudit.models.hf.families import families

    path = Path(path)
    model, tok, ip, extras = families()[model_type].tiny_parts(seed)
    for part in (model, tok, ip):
        part.save_pretrained(path)
    for name, part in extras.items():
        part.save_pretrained(path / name)
    return path


GEMMA4_SPECIALS = GEMMA_SPECIALS + ["<|video|>", "<audio_soft_token>", "<start_of_audio>", "<end_of_audio>"]


def tiny_gemma4(seed: int = 0):
    """A tiny Gemma 4: its vision encoder at patch 4 with 3 x 3 pooling (aspect-preserving, at most 70 soft tokens per
    image), a 4-layer text decoder, no audio tower."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    named = GEMMA_NAMED | {"audio_token": "<audio_soft_token>", "boa_token": "<start_of_audio>",
                           "eoa_token": "<end_of_audio>"}
    tok = char_tokenizer(GEMMA4_SPECIALS, eos="<end_of_turn>", pad="<pad>", bos="<bos>", adds_bos=True,
                         template=tiny_formats.GEMMA4, named=named)
    ids = {t: tok.convert_tokens_to_ids(t) for t in GEMMA4_SPECIALS}
    n = len(tok)
    cfg = Gemma4Config(
        text_config=dict(vocab_size=n, vocab_size_per_layer_input=n, hidden_size=64, hidden_size_per_layer_input=8,
                         intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, global_head_dim=16, max_position_embeddings=512, sliding_window=64,
                         layer_types=["sliding_attention", "sliding_attention", "sliding_attention",
                                      "full_attention"],
                         bos_token_id=ids["<bos>"], eos_token_id=ids["<end_of_turn>"], pad_token_id=ids["<pad>"]),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=2, head_dim=16, patch_size=4, pooling_kernel_size=3,
                           position_embedding_size=64),
        audio_config=None, boi_token_id=ids["<start_of_image>"], eoi_token_id=ids["<end_of_image>"],
        image_token_id=ids["<image_soft_token>"], video_token_id=ids["<|video|>"],
        boa_token_id=ids["<start_of_audio>"], eoa_token_index=ids["<end_of_audio>"],
        audio_token_id=ids["<audio_soft_token>"])
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(cfg).eval()
    set_special_ids(model, ids["<end_of_turn>"], ids["<pad>"], ids["<bos>"])
    ip = Gemma4ImageProcessorPil(patch_size=4, max_soft_tokens=70, pooling_kernel_size=3)
    return model, tok, ip


DEEPSEEK_SPECIALS = ["<pad>", "<bos>", "<eos>", "<image_placeholder>"]


def tiny_deepseek_vl(seed: int = 0):
    """A tiny DeepSeek-VL (hybrid): a SigLIP tower at 28 px / patch 14 and a SAM tower at 64 px beside it, a Llama
    decoder."""
    from transformers import DeepseekVLHybridConfig, DeepseekVLHybridForConditionalGeneration
    from transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid import (
        DeepseekVLHybridImageProcessorPil,
    )

    tok = char_tokenizer(DEEPSEEK_SPECIALS, eos="<eos>", pad="<pad>", bos="<bos>", adds_bos=True,
                         template=tiny_formats.DEEPSEEK_VL, named={"image_token": "<image_placeholder>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in DEEPSEEK_SPECIALS}
    cfg = DeepseekVLHybridConfig(
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"],
                         pad_token_id=ids["<pad>"]),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14),
        high_res_vision_config=dict(model_type="sam_vision_model", hidden_size=32, output_channels=16,
                                    num_hidden_layers=2, num_attention_heads=2, image_size=64, patch_size=16,
                                    global_attn_indexes=[1], mlp_dim=64, window_size=2),
        image_token_id=ids["<image_placeholder>"])
    torch.manual_seed(seed)
    model = DeepseekVLHybridForConditionalGeneration(cfg).eval()
    set_special_ids(model, ids["<eos>"], ids["<pad>"], ids["<bos>"])
    ip = DeepseekVLHybridImageProcessorPil(size={"height": 28, "width": 28}, high_res_size={"height": 64, "width": 64})
    return model, tok, ip
