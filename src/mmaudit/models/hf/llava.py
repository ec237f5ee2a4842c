"""LLaVA-1.5 behind the VLM protocol: CLIP preprocessing in torch, one image token per kept patch.

The family processor optionally pads the image to a square of its mean colour
(``do_pad``), resizes the shortest edge to ``size["shortest_edge"]`` (the long
side scaled and truncated, Pillow's bicubic), centre-crops ``crop_size`` and
normalises with CLIP's mean and std; the vision tower drops the CLS token
(``vision_feature_select_strategy="default"``), so the prompt carries
(crop / patch)^2 image tokens. The patch grid covers only the centre crop
(padding included), which is what the tokens see.
"""

from __future__ import annotations

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import CLIP_NORM, ModelType, family
from mmaudit.models.hf.resample import pad_square, pil_resize, shortest_edge_size
from mmaudit.models.vlm import PatchGrid


@family(ModelType("llava", "L1",
                  "transformers.models.llava.image_processing_pil_llava:LlavaImageProcessorPil",
                  "mmaudit.models.hf.tiny:tiny_llava",
                  {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}, "resample": 3,
                   **CLIP_NORM}))
class LlavaAdapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        self.crop = (int(setting(ip.crop_size, "height")), int(setting(ip.crop_size, "width")))
        self.pad = bool(getattr(ip, "do_pad", False))
        self.patch = int(model.config.vision_config.patch_size)
        strategy = model.config.vision_feature_select_strategy
        self.n_tokens = (self.crop[0] // self.patch) * (self.crop[1] // self.patch) + (1 if strategy == "full" else 0)
        self.image_placeholder = tokenizer.convert_ids_to_tokens(self.image_token_id)

    def target(self, h: int, w: int) -> tuple[int, int]:
        """The resize target of the processor's ``size`` setting."""
        size = self.image_processor.size
        if setting(size, "shortest_edge"):
            return shortest_edge_size(h, w, int(setting(size, "shortest_edge")))
        return int(setting(size, "height")), int(setting(size, "width"))

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out, grids = [], []
        ch, cw = self.crop
        for im in images:
            _, h, w = im.shape
            top0 = left0 = 0
            if self.pad:  # the mean colour as the processor writes it: int(mean * 255) levels
                fill = tuple(int(m * 255) / 255 for m in self.image_processor.image_mean)
                im, top0, left0 = pad_square(im, fill)
            ph, pw = im.shape[-2:]
            rh, rw = self.target(ph, pw)
            x = pil_resize(im, (rh, rw), self.resample)
            top, left = (rh - ch) // 2, (rw - cw) // 2
            if top < 0 or left < 0:
                raise ValueError(f"{self.name}: the crop {ch} x {cw} is larger than the resized image {rh} x {rw}")
            out.append(self.normalise(x[:, top : top + ch, left : left + cw]))
            sy, sx = rh / ph, rw / pw  # resized pixels per (padded) input pixel
            grids.append(PatchGrid(ch // self.patch, cw // self.patch, ch / sy, cw / sx, left / sx - left0,
                                   top / sy - top0))
        return {"pixel_values": self.pixel_batch(out)}, grids

    def image_text(self, image_inputs: dict, index: int) -> str:
        return self.image_placeholder * self.n_tokens

    def fallback_prompt(self, question: str) -> str:
        return f"USER: {self.image_placeholder}\n{question} ASSISTANT:"

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"])
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        return torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        """The tower's hidden states at ``vision_feature_layer`` (the layer LLaVA reads), CLS dropped as configured."""
        cfg = self.model.config
        out = self.vision_module(image_inputs["pixel_values"], output_hidden_states=True)
        layers = cfg.vision_feature_layer if isinstance(cfg.vision_feature_layer, (list, tuple)) else \
            [cfg.vision_feature_layer]
        start = 1 if cfg.vision_feature_select_strategy == "default" else 0
        return torch.cat([out.hidden_states[k][:, start:] for k in layers], -1)
