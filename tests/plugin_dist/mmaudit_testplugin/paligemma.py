"""A model family from a plugin distribution: PaliGemma (SigLIP tower, linear projector, Gemma decoder), registered
with its model type, level, PIL processor and tiny test model, as an adapter file in mmaudit.models.hf is; found
through this distribution's ``mmaudit.families`` entry point. Nothing in mmaudit names it."""

from __future__ import annotations

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid

SPECIALS = ["<pad>", "<bos>", "<eos>", "<image>"]


def tiny_paligemma(seed: int = 0):
    """A tiny PaliGemma: SigLIP at 28 px / patch 14 (4 image tokens), a 3-layer Gemma decoder."""
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    from mmaudit.models.hf.tiny import char_tokenizer, set_special_ids

    tok = char_tokenizer(SPECIALS, eos="<eos>", pad="<pad>", bos="<bos>", adds_bos=True,
                         named={"image_token": "<image>"})
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    cfg = PaliGemmaConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=14, vision_use_head=False, projection_dim=64),
        text_config=dict(model_type="gemma", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"], pad_token_id=ids["<pad>"]),
        image_token_index=ids["<image>"], projection_dim=64, hidden_size=64)
    torch.manual_seed(seed)
    model = PaliGemmaForConditionalGeneration(cfg).eval()
    set_special_ids(model, ids["<eos>"], ids["<pad>"], ids["<bos>"])
    return model, tok, SiglipImageProcessorPil(size={"height": 28, "width": 28})


@family(ModelType("paligemma", "L1", "transformers.models.siglip.image_processing_pil_siglip:SiglipImageProcessorPil",
                  "mmaudit_testplugin.paligemma:tiny_paligemma",
                  {"size": {"height": 224, "width": 224}, "resample": 3, "image_mean": [0.5] * 3,
                   "image_std": [0.5] * 3}))
class PaliGemmaAdapter(HFAdapter):
    """The processor's prompt: the image tokens, the start token, the question, a newline (no chat template)."""

    def configure(self, model, tokenizer, ip) -> None:
        self.size = (int(setting(ip.size, "height")), int(setting(ip.size, "width")))
        self.n_tokens = int(model.config.text_config.num_image_tokens)
        self.side = int(self.n_tokens**0.5)

    def preprocess(self, images):
        frames = [self.normalise(pil_resize(im, self.size, self.resample)) for im in images]
        return {"pixel_values": self.pixel_batch(frames)}, [PatchGrid(self.side, self.side, im.shape[-2],
                                                                      im.shape[-1]) for im in images]

    def render(self, question: str) -> str:
        return f"{self.image_placeholder}{self.tokenizer.bos_token}{question}\n"

    def prompt_ids(self, question: str, image_inputs: dict, index: int) -> list[int]:
        return list(self.tokenizer(self.prompt_text(question, image_inputs, index), add_special_tokens=False).input_ids)

    def image_text(self, image_inputs: dict, index: int) -> str:
        return self.image_placeholder * self.n_tokens

    def extra_inputs(self, input_ids):
        return {"token_type_ids": torch.zeros_like(input_ids)}

    def image_features(self, image_inputs: dict):
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"])
        return out.pooler_output if hasattr(out, "pooler_output") else out
