"""LLaVA-1.5 behind the VLM protocol: CLIP preprocessing in torch, one image token per kept patch.

The family processor resizes the shortest edge to the crop size (bicubic),
centre-crops a square and normalises with CLIP's mean and std; the vision tower
drops the CLS token (``vision_feature_select_strategy="default"``), so the
prompt carries (size / patch)^2 image tokens. The patch grid covers only the
centre crop, which is what the tokens see.
"""

from __future__ import annotations

import torch

from mmaudit.models.hf.base import HFAdapter, resize, setting
from mmaudit.models.vlm import PatchGrid


class LlavaAdapter(HFAdapter):
    level = "L1"

    def __init__(self, model, tokenizer, image_processor, name: str, level: str | None = None) -> None:
        super().__init__(model, tokenizer, image_processor, name, level)
        ip = image_processor
        crop = ip.crop_size
        self.size = int(setting(crop, "height"))
        self.patch = int(model.config.vision_config.patch_size)
        strategy = model.config.vision_feature_select_strategy
        self.n_tokens = (self.size // self.patch) ** 2 + (1 if strategy == "full" else 0)

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out, grids = [], []
        s = self.size
        for im in images:
            _, h, w = im.shape
            scale = s / min(h, w)
            rh, rw = max(s, round(h * scale)), max(s, round(w * scale))
            x = resize(im, (rh, rw))
            top, left = (rh - s) // 2, (rw - s) // 2
            x = x[:, top : top + s, left : left + s]
            out.append(self.normalise(x))
            g = s // self.patch
            grids.append(PatchGrid(g, g, s / scale, s / scale, left / scale, top / scale))
        return {"pixel_values": self.pixel_batch(out)}, grids

    def prompt_text(self, question: str, image_inputs: dict, index: int) -> str:
        image = self.tokenizer.convert_ids_to_tokens(self.image_token_id) * self.n_tokens
        return f"USER: {image}\n{question} ASSISTANT:"

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
