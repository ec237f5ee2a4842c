"""BLIP-2 (and, through it, InstructBLIP) behind the VLM protocol.

The image reaches the language model as ``num_query_tokens`` learned Q-Former
queries, not patches. Preprocessing: resize to the tower's square size
(Pillow's bicubic, aspect not kept) and CLIP normalisation. The family has no
chat template: as its processor does, the query tokens come first, then the
prompt ("Question: ... Answer:", the model card's format) tokenized with the
tokenizer's own start token. For OAR the text-to-image
attention is carried through the bottleneck: text -> query attention in the
language model times query -> patch cross-attention in the Q-Former (both
averaged over heads and layers, the CLS column dropped), which gives a
(text, patch) map on the vision tower's patch grid.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import CLIP_NORM, ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid

BLIP_PROCESSOR = "transformers.models.blip.image_processing_pil_blip:BlipImageProcessorPil"
BLIP_PUBLISHED = {"size": {"height": 224, "width": 224}, "resample": 3, **CLIP_NORM}  # BLIP-2 and InstructBLIP


@family(ModelType("blip-2", "L1", BLIP_PROCESSOR, "mmaudit.models.hf.tiny:tiny_blip2", BLIP_PUBLISHED))
class Blip2Adapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        size = ip.size
        self.size = (int(setting(size, "height")), int(setting(size, "width")))
        self.n_queries = int(model.config.num_query_tokens)
        vc = model.config.vision_config
        self.grid = (int(vc.image_size) // int(vc.patch_size),) * 2

    @property
    def vision_module(self):
        return self.model.vision_model

    @property
    def decoder_layers(self):
        lm = self.model.language_model
        for path in ("model.decoder.layers", "model.layers"):
            obj = lm
            for part in path.split("."):
                obj = getattr(obj, part, None)
            if obj is not None:
                return list(obj)
        raise NotImplementedError("language model layers not found")

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out, grids = [], []
        for im in images:
            out.append(self.normalise(pil_resize(im, self.size, self.resample)))
            grids.append(PatchGrid(*self.grid, im.shape[-2], im.shape[-1]))
        return {"pixel_values": self.pixel_batch(out)}, grids

    def fallback_prompt(self, question: str) -> str:
        return f"Question: {question} Answer:"

    def prompt_ids(self, question: str, image_inputs: dict, index: int) -> list[int]:
        """The query tokens, then the prompt with the tokenizer's special tokens (Blip2Processor's order)."""
        text = self.render(question)
        return [self.image_token_id] * self.n_queries + list(self.tokenizer(text, add_special_tokens=True).input_ids)

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"])
        return out.pooler_output if hasattr(out, "pooler_output") else out

    def qformer_inputs(self, enc, image_embeds: torch.Tensor) -> dict:
        return {}

    def attentions(self, images, prompts: list[str], layers: Sequence[int] | None = None) -> list[torch.Tensor]:
        n = len(self.decoder_layers)
        layers = list(layers) if layers is not None else list(range(n // 2, n))
        enc = self.encode(images, prompts)
        with self.eager_attention(), torch.no_grad():
            out = self.model(**self._inputs(enc), output_attentions=True, use_cache=False)
            embeds = self.model.vision_model(enc.image_inputs["pixel_values"]).last_hidden_state
            mask = torch.ones(embeds.shape[:-1], dtype=torch.long, device=embeds.device)
            q = self.model.qformer(query_embeds=self.model.query_tokens.expand(len(prompts), -1, -1),
                                   encoder_hidden_states=embeds, encoder_attention_mask=mask,
                                   output_attentions=True, return_dict=True, **self.qformer_inputs(enc, embeds))
        lm = out.language_model_outputs.attentions
        text_att = torch.stack([lm[i].float() for i in layers]).mean(0).mean(1)  # (B, S, S)
        cross = [c for c in q.cross_attentions if c is not None]
        to_patch = torch.stack([c.float() for c in cross]).mean(0).mean(1)[:, -self.n_queries :, 1:]  # (B, Q, P)
        result = []
        for b in range(len(prompts)):
            img = torch.nonzero(enc.input_ids[b] == self.image_token_id).flatten()
            after = torch.arange(int(img.max()) + 1, enc.input_ids.shape[1], device=text_att.device)
            result.append(text_att[b][after][:, img] @ to_patch[b].to(text_att.device))
        return result
