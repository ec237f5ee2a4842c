"""InstructBLIP: BLIP-2 whose Q-Former also reads the instruction (its own tokenizer, ``qformer_input_ids``).

Everything else is the BLIP-2 adapter's. Vision features without a prompt
(Vis-PGD) use an empty instruction.
"""

from __future__ import annotations

import torch

from mmaudit.models.hf.blip2 import BLIP_PROCESSOR, BLIP_PUBLISHED, Blip2Adapter
from mmaudit.models.hf.families import ModelType, family


@family(ModelType("instructblip", "L1", BLIP_PROCESSOR, "mmaudit.models.hf.tiny:tiny_instructblip",
                  BLIP_PUBLISHED))
class InstructBlipAdapter(Blip2Adapter):

    def __init__(self, model, tokenizer, image_processor, name: str, level: str | None = None,
                 chat_template: str | None = None, qformer_tokenizer=None) -> None:
        if qformer_tokenizer is None:
            raise ValueError("InstructBLIP needs its Q-Former tokenizer (the checkpoint's qformer_tokenizer/)")
        self.qformer_tokenizer = qformer_tokenizer
        super().__init__(model, tokenizer, image_processor, name, level, chat_template)

    @classmethod
    def load_extras(cls, path, max_pixels: int | None = None) -> dict:
        from transformers import AutoTokenizer

        return {"qformer_tokenizer": AutoTokenizer.from_pretrained(path, subfolder="qformer_tokenizer")}

    @classmethod
    def tiny_extras(cls, extra: tuple) -> dict:
        return {"qformer_tokenizer": extra[0]}

    def fallback_prompt(self, question: str) -> str:
        return question  # the instruction itself, as the model card passes it

    def _instruction(self, prompts: list[str]) -> dict:
        q = self.qformer_tokenizer(list(prompts), padding=True, return_tensors="pt")
        return {"qformer_input_ids": q.input_ids.to(self.vision_device),
                "qformer_attention_mask": q.attention_mask.to(self.vision_device)}

    def encode(self, images, prompts: list[str], answers: list[str] | None = None):
        enc = super().encode(images, prompts, answers)
        enc.image_inputs = {**enc.image_inputs, **self._instruction(prompts)}
        return enc

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        extra = {k: image_inputs[k] for k in ("qformer_input_ids", "qformer_attention_mask") if k in image_inputs}
        if not extra:
            extra = self._instruction([""] * len(image_inputs["pixel_values"]))
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"], **extra)
        return out.pooler_output if hasattr(out, "pooler_output") else out

    def qformer_inputs(self, enc, image_embeds: torch.Tensor) -> dict:
        ids, mask = enc.image_inputs["qformer_input_ids"], enc.image_inputs["qformer_attention_mask"]
        queries = torch.ones((len(ids), self.n_queries), dtype=mask.dtype, device=mask.device)
        return {"input_ids": ids, "attention_mask": torch.cat([queries, mask], 1)}
