"""DeepSeek-VL (hybrid) behind the VLM protocol: a SigLIP view at low resolution and a SAM view at high resolution.

The family processor resizes the longest side to the high-resolution size
(sides rounded, Pillow's bicubic), pads to a square of the mean colour, resizes
that square again to the low-resolution size, and normalises each view (CLIP
mean and std). The SAM features are brought to the SigLIP grid and the aligner
joins both into one token per low-resolution patch, so the prompt carries
(low size / patch)^2 image tokens where the chat template writes the image
placeholder. Vis-PGD's encoder features are the SigLIP tower's (the model's
``vision_config``); the SAM view reaches the language model through the
connector stage.
"""

from __future__ import annotations

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import ModelType, family
from mmaudit.models.hf.resample import longest_side_size, pad_square, pil_resize
from mmaudit.models.vlm import PatchGrid


@family(ModelType("deepseek_vl_hybrid", "L2",
                  "transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid:"
                  "DeepseekVLHybridImageProcessorPil",
                  "mmaudit.models.hf.tiny:tiny_deepseek_vl", {}))  # the processor's own defaults
class DeepseekVLAdapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        self.low = int(setting(ip.size, "height"))
        self.high = int(setting(ip.high_res_size, "height"))
        self.min_size = int(getattr(ip, "min_size", 14))
        self.pad = bool(getattr(ip, "do_pad", True))
        vc = model.config.vision_config
        self.side = int(vc.image_size) // int(vc.patch_size)
        self.image_placeholder = tokenizer.convert_ids_to_tokens(self.image_token_id)

    @property
    def vision_module(self):
        return self.model.model.vision_model

    def _fill(self, mean) -> tuple[float, ...]:
        return tuple(int(m * 255) / 255 for m in mean)  # the processor's int(mean * 255) background

    def _normalise(self, x: torch.Tensor, mean, std) -> torch.Tensor:
        m = torch.tensor(mean, dtype=x.dtype, device=x.device).view(3, 1, 1)
        s = torch.tensor(std, dtype=x.dtype, device=x.device).view(3, 1, 1)
        return (x - m) / s

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        ip = self.image_processor
        low, high, grids = [], [], []
        for im in images:
            _, h, w = im.shape
            rh, rw = longest_side_size(h, w, self.high, self.min_size)
            x = pil_resize(im, (rh, rw), getattr(ip, "high_res_resample", self.resample))
            top = left = 0
            if self.pad:
                x, top, left = pad_square(x, self._fill(ip.high_res_image_mean))
            small = pil_resize(x, longest_side_size(*x.shape[-2:], self.low, self.min_size), self.resample)
            if self.pad:
                small = pad_square(small, self._fill(ip.image_mean))[0]
            high.append(self._normalise(x, ip.high_res_image_mean, ip.high_res_image_std))
            low.append(self._normalise(small, ip.image_mean, ip.image_std))
            sy, sx = rh / h, rw / w  # high-resolution pixels per input pixel
            grids.append(PatchGrid(self.side, self.side, x.shape[-2] / sy, x.shape[-1] / sx, -left / sx, -top / sy))
        dtype = next(self.vision_module.parameters()).dtype
        return {"pixel_values": torch.stack(low).to(dtype), "high_res_pixel_values": torch.stack(high).to(dtype)}, grids

    def image_text(self, image_inputs: dict, index: int) -> str:
        return self.image_placeholder * self.side**2

    def fallback_prompt(self, question: str) -> str:
        return f"User: {self.image_placeholder}{question}\n\nAssistant:"

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        return self.vision_module(image_inputs["pixel_values"]).last_hidden_state

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.model.get_image_features(image_inputs["pixel_values"], image_inputs["high_res_pixel_values"])
        return out.pooler_output
