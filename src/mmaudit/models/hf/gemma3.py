"""Gemma 3 behind the VLM protocol: SigLIP at a fixed square size, an average-pooling projector.

The family processor resizes to the tower's size without keeping the aspect
ratio (bilinear; pan-and-scan off, its default) and normalises with mean = std
= 0.5. The projector average-pools the patch grid down to
``mm_tokens_per_image`` soft tokens (a k x k grid over the whole image), which
the prompt carries between the begin- and end-of-image markers; images attend
bidirectionally inside their block, which the model builds from
``token_type_ids`` (1 on image tokens).
"""

from __future__ import annotations

import math

import torch

from mmaudit.models.hf.base import HFAdapter, resize, setting
from mmaudit.models.vlm import PatchGrid


class Gemma3Adapter(HFAdapter):
    level = "L2"

    def __init__(self, model, tokenizer, image_processor, name: str, level: str | None = None) -> None:
        super().__init__(model, tokenizer, image_processor, name, level)
        size = image_processor.size
        self.size = (int(setting(size, "height")), int(setting(size, "width")))
        self.n_tokens = int(model.config.mm_tokens_per_image)
        self.side = math.isqrt(self.n_tokens)

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out, grids = [], []
        for im in images:
            out.append(self.normalise(resize(im, self.size, "bilinear")))
            grids.append(PatchGrid(self.side, self.side, im.shape[-2], im.shape[-1]))
        return {"pixel_values": self.pixel_batch(out)}, grids

    def prompt_text(self, question: str, image_inputs: dict, index: int) -> str:
        tok = self.tokenizer
        boi = tok.convert_ids_to_tokens(int(self.model.config.boi_token_id))
        eoi = tok.convert_ids_to_tokens(int(self.model.config.eoi_token_id))
        image = tok.convert_ids_to_tokens(self.image_token_id) * self.n_tokens
        return f"<start_of_turn>user\n\n\n{boi}{image}{eoi}\n\n{question}<end_of_turn>\n<start_of_turn>model\n"

    def extra_inputs(self, input_ids: torch.Tensor) -> dict:
        return {"token_type_ids": (input_ids == self.image_token_id).long()}

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"])
        return out.pooler_output if hasattr(out, "pooler_output") else out
