"""Gemma 3 behind the VLM protocol: SigLIP at a fixed square size, an average-pooling projector.

The family processor resizes to the tower's size without keeping the aspect
ratio (Pillow's bilinear; pan-and-scan off, its default) and normalises with
mean = std = 0.5. The projector average-pools the patch grid down to
``mm_tokens_per_image`` soft tokens (a k x k grid over the whole image), which
the processor puts, between blank lines and the begin- and end-of-image markers,
where the chat template writes the begin-of-image marker; images attend
bidirectionally inside their block, which the model builds from
``token_type_ids`` (1 on image tokens).
"""

from __future__ import annotations

import math

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import HALF_NORM, ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid


@family(ModelType("gemma3", "L2",
                  "transformers.models.gemma3.image_processing_pil_gemma3:Gemma3ImageProcessorPil",
                  "mmaudit.models.hf.tiny:tiny_gemma3",
                  {"size": {"height": 896, "width": 896}, "resample": 2, **HALF_NORM}))
class Gemma3Adapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        if getattr(ip, "do_pan_and_scan", False):
            raise NotImplementedError(f"{self.name}: pan-and-scan crops are not reproduced; use do_pan_and_scan=False")
        size = ip.size
        self.size = (int(setting(size, "height")), int(setting(size, "width")))
        self.n_tokens = int(model.config.mm_tokens_per_image)
        self.side = math.isqrt(self.n_tokens)
        self.image_placeholder = tokenizer.convert_ids_to_tokens(int(model.config.boi_token_id))
        self.eoi = tokenizer.convert_ids_to_tokens(int(model.config.eoi_token_id))

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out, grids = [], []
        for im in images:
            out.append(self.normalise(pil_resize(im, self.size, self.resample)))
            grids.append(PatchGrid(self.side, self.side, im.shape[-2], im.shape[-1]))
        return {"pixel_values": self.pixel_batch(out)}, grids

    def image_text(self, image_inputs: dict, index: int) -> str:
        soft = self.tokenizer.convert_ids_to_tokens(self.image_token_id) * self.n_tokens
        return f"\n\n{self.image_placeholder}{soft}{self.eoi}\n\n"

    def fallback_prompt(self, question: str) -> str:
        bos = self.tokenizer.bos_token or ""
        return f"{bos}<start_of_turn>user\n{self.image_placeholder}{question}<end_of_turn>\n<start_of_turn>model\n"

    def extra_inputs(self, input_ids: torch.Tensor) -> dict:
        return {"token_type_ids": (input_ids == self.image_token_id).long()}

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"])
        return out.pooler_output if hasattr(out, "pooler_output") else out
