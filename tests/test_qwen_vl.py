"""Qwen-VL-Chat on the native implementation: a tiny checkpoint in the released layout loads through `load_hf`,
its prompt is the release's chat format id for id, and it audits end to end with layer recovery (the protocol
suite runs on it as on every family: tests/test_protocol.py)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tiktoken")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    from mmaudit.models.hf.qwen_vl.tiny import save_tiny_qwen_vl

    return save_tiny_qwen_vl(tmp_path_factory.mktemp("qwen-vl-chat"))


def test_a_checkpoint_in_the_released_layout_loads_through_load_hf(released):
    from safetensors import safe_open

    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.qwen_vl_chat import QwenVLChatAdapter
    from mmaudit.models.hf.registry import check_supported

    config = json.loads((released / "config.json").read_text())
    assert config["model_type"] == "qwen" and config["architectures"] == ["QWenLMHeadModel"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_qwen.QWenLMHeadModel"  # remote code, never run
    assert set(config["visual"]) >= {"heads", "image_size", "image_start_id", "layers", "mlp_ratio", "output_dim",
                                     "patch_size", "width"}
    with safe_open(released / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    for name in ("transformer.wte.weight", "transformer.h.0.attn.c_attn.bias", "transformer.h.0.mlp.w1.weight",
                 "transformer.ln_f.weight", "transformer.visual.conv1.weight",
                 "transformer.visual.positional_embedding",
                 "transformer.visual.transformer.resblocks.0.attn.in_proj.weight",
                 "transformer.visual.attn_pool.attn.in_proj_weight", "transformer.visual.attn_pool.pos_embed",
                 "transformer.visual.attn_pool.kv_proj.weight", "transformer.visual.proj", "lm_head.weight"):
        assert name in keys, name
    vlm = load_hf(released, dtype="float32")
    assert type(vlm) is QwenVLChatAdapter and vlm.level == "L2"
    assert check_supported("Qwen-VL-Chat").supported


def test_the_prompt_is_the_releases_chat_format_id_for_id(released):
    """By hand: the tiny vocabulary is the 256 single bytes at their byte values, the release's special tokens
    after them (<|endoftext|> 256, <|im_start|> 257, <|im_end|> 258, 205 extras, then <ref> ... <img> 470, </img>
    471, <imgpad> 472); the release's make_context for "Picture 1: <img>PATH</img>\\nHow many bars?" with its
    default system message, the 256 image positions filled."""
    from mmaudit.models.hf import load_hf

    vlm = load_hf(released, dtype="float32")
    start, end, nl = 257, 258, [10]
    expected = ([start, *b"system", *nl, *b"You are a helpful assistant.", end, *nl,
                 start, *b"user", *nl, *b"Picture 1: ", 470, *[472] * 256, 471, *b"\nHow many bars?", end, *nl,
                 start, *b"assistant", *nl])
    assert vlm.tokenizer.chat_ids("How many bars?") == expected
    ids = vlm.encode(torch.rand(1, 3, 40, 60), ["How many bars?"]).input_ids[0].tolist()
    assert ids == expected
    assert vlm.answer_tokens("7") == [ord("7"), end]  # an answer ends the assistant's turn
    assert vlm.tokenizer.decode([*b"caf", 258], skip_special_tokens=True) == "caf"


def test_the_image_positions_carry_the_resamplers_output_and_only_they_see_the_pixels(released):
    from mmaudit.models.hf import load_hf

    vlm = load_hf(released, dtype="float32")
    x = torch.rand(2, 3, 56, 56, generator=torch.Generator().manual_seed(0))
    enc = vlm.encode(x, ["q", "q"])
    with torch.no_grad():
        feats = vlm.image_features(enc.image_inputs)
        hidden = []
        handle = vlm.decoder_layers[0].register_forward_pre_hook(lambda _m, args: hidden.append(args[0]))
        vlm.model(**vlm._inputs(enc), use_cache=False)
        handle.remove()
    pos = vlm.image_positions(x, ["q", "q"])
    assert [len(p) for p in pos] == [256, 256]
    for b in range(2):
        assert torch.allclose(hidden[0][b, pos[b]], feats[b], atol=1e-6)


def test_an_audit_of_qwen_vl_chat_runs_end_to_end_with_layer_recovery(released, tmp_path):
    """Random weights answer no dataset question right, so the audit is judged against the model's own answers
    (`--reference self`): every answered question is in C, End-PGD flips some, layer recovery patches them."""
    import mmaudit

    result = mmaudit.audit(str(released), "synthetic:1", attacks=["end_pgd", "vis_pgd", "typo_evid"], steps=5,
                           reference="self", recovery=2, ocr_limit=0, n_boot=100, out=tmp_path / "run",
                           dtype="float32")
    (row,) = result.models
    assert row.n_correct > 0 and set(row.asr) == {"end_pgd", "vis_pgd", "typo_evid"}
    kinds = {r["kind"] for r in result.records(None)}
    assert "recovery_excluded" not in kinds
    flips = [r for r in result.records() if r["attack"] == "end_pgd" and r["flipped"]]
    rec = result.records("recovery")
    assert flips and len(rec) == min(2, len(flips))  # the first End-PGD flips, patched at the image positions
    assert all(r["positions"] == "image" and len(r["answers_by_layer"]) == 3 and "reproduced" in r for r in rec)


def test_the_native_blocks_equal_transformers_own_implementations_of_the_same_math(released):
    """Independent implementations on the same tiny weights: the decoder against transformers' Qwen2 (the same
    blocks: RMSNorm, rotate-half rotary, biased q/k/v from the fused ``c_attn``, SwiGLU with ``w2`` gated), the
    ViT blocks against transformers' SigLIP encoder (pre-norm blocks, exact GELU), q/k/v taken out of the
    release's per-head ``in_proj`` layout ([q_h, k_h, v_h] per head)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, SiglipVisionConfig
    from transformers.models.siglip.modeling_siglip import SiglipEncoder

    from mmaudit.models.hf import load_hf

    vlm = load_hf(released, dtype="float32")
    cfg, model = vlm.model.config, vlm.model
    width, heads = cfg.hidden_size, cfg.num_attention_heads
    ref = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=cfg.vocab_size, hidden_size=width, intermediate_size=cfg.intermediate_size // 2,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=heads, num_key_value_heads=heads,
        rms_norm_eps=cfg.layer_norm_epsilon, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=cfg.seq_length, tie_word_embeddings=False, attn_implementation="eager")).eval()
    sd = {"model.embed_tokens.weight": model.transformer.wte.weight, "model.norm.weight": model.transformer.ln_f.weight,
          "lm_head.weight": model.lm_head.weight}
    for i, block in enumerate(model.transformer.h):
        p = f"model.layers.{i}."
        for name, w, b in zip("qkv", block.attn.c_attn.weight.split(width), block.attn.c_attn.bias.split(width)):
            sd[p + f"self_attn.{name}_proj.weight"], sd[p + f"self_attn.{name}_proj.bias"] = w, b
        sd |= {p + "self_attn.o_proj.weight": block.attn.c_proj.weight, p + "input_layernorm.weight": block.ln_1.weight,
               p + "post_attention_layernorm.weight": block.ln_2.weight,
               p + "mlp.gate_proj.weight": block.mlp.w2.weight, p + "mlp.up_proj.weight": block.mlp.w1.weight,
               p + "mlp.down_proj.weight": block.mlp.c_proj.weight}
    missing, unexpected = ref.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    ids = torch.tensor([vlm.tokenizer.encode("system\nHow many bars are there in the chart?")])
    with torch.no_grad():
        ours, theirs = model(input_ids=ids).logits, ref(input_ids=ids).logits
    assert float((ours - theirs).abs().max()) < 1e-4

    vis = vlm.visual
    v = cfg.visual
    enc = SiglipEncoder(SiglipVisionConfig(hidden_size=v["width"], intermediate_size=int(v["width"] * v["mlp_ratio"]),
                                           num_hidden_layers=v["layers"], num_attention_heads=v["heads"],
                                           layer_norm_eps=1e-6, hidden_act="gelu")).eval()
    d = v["width"] // v["heads"]
    sd = {}
    for i, block in enumerate(vis.transformer.resblocks):
        p = f"layers.{i}."
        w = block.attn.in_proj.weight.view(v["heads"], 3, d, -1)
        b = block.attn.in_proj.bias.view(v["heads"], 3, d)
        for k, name in enumerate("qkv"):
            sd[p + f"self_attn.{name}_proj.weight"] = w[:, k].reshape(v["width"], -1)
            sd[p + f"self_attn.{name}_proj.bias"] = b[:, k].reshape(-1)
        sd |= {p + "self_attn.out_proj.weight": block.attn.out_proj.weight,
               p + "self_attn.out_proj.bias": block.attn.out_proj.bias,
               p + "layer_norm1.weight": block.ln_1.weight, p + "layer_norm1.bias": block.ln_1.bias,
               p + "layer_norm2.weight": block.ln_2.weight, p + "layer_norm2.bias": block.ln_2.bias,
               p + "mlp.fc1.weight": block.mlp.c_fc.weight, p + "mlp.fc1.bias": block.mlp.c_fc.bias,
               p + "mlp.fc2.weight": block.mlp.c_proj.weight, p + "mlp.fc2.bias": block.mlp.c_proj.bias}
    enc.load_state_dict(sd)
    x = torch.randn(2, 16, v["width"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float((vis.transformer(x) - enc(inputs_embeds=x).last_hidden_state).abs().max()) < 1e-4
