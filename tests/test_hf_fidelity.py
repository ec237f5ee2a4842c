"""A real checkpoint sees what its own pipeline shows it: the processor's input_ids, and its pixels at real sizes.

Pixels: each family's adapter, set up with the image processor settings its real checkpoints publish, against
that PIL processor, on real-size images (photos and a text page) that all need resampling. Prompts: the
adapter's input_ids against the family's transformers processor (``apply_chat_template(tokenize=True)`` with
the image), built offline from its image processor and a tokenizer that carries the family's prompt format.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

pytest.importorskip("transformers")

from conftest import tiny_model  # noqa: E402

SIZES = [(600, 800), (427, 640), (333, 500), (512, 512), (1200, 300), (2200, 1700)]  # (h, w); the last a text page


def real_image(h: int, w: int, seed: int) -> np.ndarray:
    """A photo-like image (smooth gradients, noise, sharp shapes) or, for a page, black text on white."""
    rng = np.random.default_rng(seed)
    if h >= 2000:
        im = Image.new("RGB", (w, h), "white")
        draw = ImageDraw.Draw(im)
        font = ImageFont.load_default(size=22)
        for y in range(40, h - 40, 34):
            draw.text((60, y), " ".join(f"w{rng.integers(1e6)}" for _ in range(14)), fill=(0, 0, 0), font=font)
        return np.array(im)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(xx / (17 + 3 * c)) * np.cos(yy / 23) for c in range(3)], -1)
    img = np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)
    img[h // 3 : h // 3 + h // 5, w // 4 : w // 2] = (250, 20, 30)
    return img


def pixels(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img).permute(2, 0, 1).float() / 255


def published_settings() -> dict[str, tuple[str, dict | None]]:
    """label -> (model type, the settings its checkpoints publish): every registered family, as it declares them
    (mmaudit.models.hf.families), plus LLaVA's padded variant."""
    from mmaudit.models.hf.families import families

    out = {name: (name, fam.model_type.published) for name, fam in families().items() if fam.model_type.tiny}
    if "llava" in out:
        out["llava-pad"] = ("llava", out["llava"][1] | {"do_pad": True})
    return out


PUBLISHED = published_settings()
PIXEL_KEYS = ("pixel_values", "high_res_pixel_values")


def with_processor(vlm, processor):
    """The same adapter class over the same tiny model, reading its settings from ``processor``."""
    kw = {"qformer_tokenizer": vlm.qformer_tokenizer} if hasattr(vlm, "qformer_tokenizer") else {}
    return type(vlm)(vlm.model, vlm.tokenizer, processor, name=vlm.name, level=vlm.level, **kw)


def published(family: str):
    """(adapter over the tiny model, the family's PIL processor at the published settings) of a PUBLISHED label."""
    from mmaudit.models.hf.families import families

    model_type, settings = PUBLISHED[family]
    assert settings is not None, f"{model_type} declares no published processor settings (ModelType.published)"
    processor = families()[model_type].processor_class()(**settings)
    return with_processor(tiny_model(model_type), processor), processor


@pytest.mark.slow
@pytest.mark.parametrize("family", list(PUBLISHED))
def test_pixels_equal_the_family_processor_at_published_settings_on_real_sizes(family, record_property):
    vlm, processor = published(family)
    rows = []
    for k, (h, w) in enumerate(SIZES):
        img = real_image(h, w, k)
        ref = processor(images=[[img]] if family.startswith(("smolvlm", "gemma4")) else [img], return_tensors="pt")
        ours, _ = vlm.preprocess([pixels(img)])
        for key in PIXEL_KEYS:
            if key not in ref:
                continue
            a, b = ours[key].float(), ref[key].float()
            assert a.shape == b.shape, (family, (h, w), key, a.shape, b.shape)
            diff = (a - b).abs()
            std = min(processor.image_std) if getattr(processor, "do_normalize", True) else 1.0
            rows.append((h, w, key, float(diff.mean()), float(diff.max())))
            # at most one 8-bit level on average (1/255 of the normalised input range), and the largest gap
            # no more than float rounding: the resampling is Pillow's own arithmetic
            assert float(diff.mean()) <= 1 / 255 / std and float(diff.max()) < 1e-4, (family, (h, w), key)
        if "image_grid_thw" in ref:
            assert torch.equal(ours["image_grid_thw"], ref["image_grid_thw"])
        if "image_position_ids" in ref:
            assert torch.equal(ours["image_position_ids"], ref["image_position_ids"].to(ours["image_position_ids"]))
    record_property("pixel_parity", rows)


def test_llava_grid_follows_the_processors_truncated_resize_and_crop(tiny_llava):
    img = np.random.default_rng(0).integers(0, 256, size=(40, 56, 3), dtype=np.uint8)
    ref = tiny_llava.image_processor(images=[img], return_tensors="pt")["pixel_values"]
    ours, grids = tiny_llava.preprocess([pixels(img)])
    assert torch.allclose(ours["pixel_values"], ref, atol=1e-6)
    g = grids[0]  # 40 x 56 -> 28 x 39 (int(28 * 56 / 40) = 39, truncated), crop columns 5..33 of 39
    assert (g.rows, g.cols) == (2, 2) and g.x0 == pytest.approx(5 * 56 / 39) and g.width == pytest.approx(28 * 56 / 39)
    assert g.region_to_patches((0, 0, 7, 40)) == [] and g.region_to_patches((30, 25, 40, 30)) == [3]


def test_qwen_resize_follows_transformers_at_the_edges(tiny_qwen):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference

    from mmaudit.errors import InputError
    from mmaudit.models.hf.qwen2_5_vl import smart_resize

    for h, w in [(10, 10), (13, 300), (7, 100), (40, 2000), (2000, 11), (1, 150)]:
        assert smart_resize(h, w, 28, 3136, 12845056) == reference(h, w, 28, 3136, 12845056), (h, w)
    with pytest.raises(InputError, match="aspect ratio"):
        smart_resize(5, 1100, 28, 3136, 12845056)


def test_pixel_gradients_pass_through_the_exact_resize(tiny_smolvlm):
    """The rounding and clamping between Pillow's passes are straight-through: gradients reach every raw pixel."""
    x = pixels(real_image(90, 130, 3)).requires_grad_(True)
    out, _ = tiny_smolvlm.preprocess([x])
    (g,) = torch.autograd.grad(out["pixel_values"].float().square().sum(), x)
    assert torch.isfinite(g).all() and (g.abs().sum(0) > 0).float().mean() > 0.99


# --------------------------------------------------------------------------- prompts

QUESTION = "What was the value in 2019?\nAnswer the question using a single word or phrase."


def _skip_video_check(monkeypatch):
    """The video processors need torchvision, which does not import here; these prompts never touch video."""
    from transformers import processing_utils

    real = processing_utils.ProcessorMixin.check_argument_for_proper_class

    def check(self, name, arg):
        return None if "video" in name else real(self, name, arg)

    monkeypatch.setattr(processing_utils.ProcessorMixin, "check_argument_for_proper_class", check)


NO_VIDEO = SimpleNamespace(num_frames=None, fps=None)  # stands in for a video processor these prompts never use


def processor_for(model_type: str, vlm):
    """The family's own transformers processor over the tiny model's tokenizer and image processor."""
    import transformers as tf

    tok, ip, template = vlm.tokenizer, vlm.image_processor, vlm.tokenizer.chat_template
    family = "deepseek-vl" if model_type == "deepseek_vl_hybrid" else model_type
    if family.startswith("qwen"):
        return tf.Qwen2_5_VLProcessor(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=template)
    if family == "llava":
        return tf.LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=vlm.patch, chat_template=template,
                                 vision_feature_select_strategy=vlm.model.config.vision_feature_select_strategy,
                                 num_additional_image_tokens=1)
    if family == "gemma3":
        return tf.Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=template,
                                  image_seq_length=vlm.n_tokens)
    if family == "smolvlm":
        pytest.importorskip("num2words")
        return tf.SmolVLMProcessor(image_processor=ip, tokenizer=tok, video_processor=NO_VIDEO,
                                   chat_template=template, image_seq_len=vlm.seq_len)
    if family == "gemma4":
        from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

        return tf.Gemma4Processor(feature_extractor=Gemma4AudioFeatureExtractor(), image_processor=ip, tokenizer=tok,
                                  video_processor=NO_VIDEO, chat_template=template)
    if family == "deepseek-vl":
        return tf.DeepseekVLHybridProcessor(image_processor=ip, tokenizer=tok, chat_template=template,
                                            num_image_tokens=vlm.side**2)
    raise KeyError(f"{model_type}: a chat-templated family with no reference processor here; add it to "
                   "processor_for")


def templated() -> list[str]:
    """Every registered model type with a tiny model, but BLIP's (no chat template: below)."""
    from mmaudit.models.hf.families import families

    return [t for t, fam in families().items() if fam.model_type.tiny and t not in ("blip-2", "instructblip")]


@pytest.mark.parametrize("family", templated())
def test_input_ids_equal_the_family_processor(family, monkeypatch):
    _skip_video_check(monkeypatch)
    vlm = tiny_model(family)
    if not vlm.chat_template:
        pytest.skip(f"{family} prompts without a chat template, as its processor writes the prompt")
    processor = processor_for(family, vlm)
    for h, w in [(56, 84), (70, 40), (64, 64)]:
        img = real_image(h, w, h)
        conv = [{"role": "user", "content": [{"type": "image", "image": Image.fromarray(img)},
                                             {"type": "text", "text": QUESTION}]}]
        ref = processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, return_dict=True,
                                            return_tensors="pt")["input_ids"][0].tolist()
        ours = vlm.encode(pixels(img)[None], [QUESTION]).input_ids[0].tolist()
        assert ours == ref, (family, (h, w), vlm.tokenizer.decode(ours), vlm.tokenizer.decode(ref))
        image_id = vlm.image_token_id
        assert ours.count(image_id) > 0 and ours.count(image_id) == ref.count(image_id)
        bos = vlm.tokenizer.bos_token_id
        if bos is not None and family in ("llava", "gemma3", "gemma4", "deepseek_vl_hybrid"):
            assert ours[0] == bos and ours.count(bos) == 1  # one start token, where the checkpoint puts it


@pytest.mark.parametrize("fixture", ["tiny_blip2", "tiny_instructblip"])
def test_blip_families_put_query_tokens_before_the_start_token(fixture, request):
    """No chat template: as Blip2Processor / InstructBlipProcessor do, the query tokens, then the tokenized prompt
    with the tokenizer's start token."""
    import transformers as tf

    vlm = request.getfixturevalue(fixture)
    img = real_image(40, 40, 0)
    if fixture == "tiny_blip2":
        processor = tf.Blip2Processor(image_processor=vlm.image_processor, tokenizer=vlm.tokenizer,
                                      num_query_tokens=vlm.n_queries)
        text = f"Question: {QUESTION} Answer:"
    else:
        processor = tf.InstructBlipProcessor(image_processor=vlm.image_processor, tokenizer=vlm.tokenizer,
                                             qformer_tokenizer=vlm.qformer_tokenizer, num_query_tokens=vlm.n_queries)
        text = QUESTION
    ref = processor(images=[img], text=text, return_tensors="pt")["input_ids"][0].tolist()
    assert vlm.encode(pixels(img)[None], [QUESTION]).input_ids[0].tolist() == ref


def test_without_a_template_the_hand_written_prompt_is_the_fallback(tiny_llava):
    from mmaudit.models.hf.llava import LlavaAdapter

    vlm = LlavaAdapter(tiny_llava.model, tiny_llava.tokenizer, tiny_llava.image_processor, name="x", chat_template="")
    vlm.chat_template = None
    ids = vlm.encode(pixels(real_image(40, 40, 0))[None], ["what ?"]).input_ids[0].tolist()
    text = vlm.tokenizer.decode(ids)
    assert text.startswith("<s>USER: <image>") and text.endswith("\nwhat ? ASSISTANT:")
