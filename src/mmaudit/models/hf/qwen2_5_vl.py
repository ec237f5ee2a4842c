"""Qwen2.5-VL (and Qwen2-VL, same image path) behind the VLM protocol.

Preprocessing is the family's own, rewritten in torch so gradients reach raw
pixels: smart-resize to multiples of patch x merge (Pillow's bicubic, exactly),
normalisation, and Qwen's flattening of (temporal x patch x patch) blocks in
merge-window order. ``max_pixels`` (the processor's ``size["longest_edge"]``)
sets the image's token count, hence memory; an adapter may lower it.
"""

from __future__ import annotations

import torch

from mmaudit.errors import InputError
from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import CLIP_NORM, HALF_NORM, ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.hf.windows import batch_windows
from mmaudit.models.vlm import PatchGrid

DEFAULT_SYSTEM = "You are a helpful assistant."


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen's target size: multiples of ``factor``, pixel count within bounds, aspect kept (transformers'
    rule to the letter: sides may round to 0 before the min-pixels rescue; aspect ratios over 200 are refused)."""
    import math

    if max(height, width) / min(height, width) > 200:
        raise InputError(None, "image", f"aspect ratio {max(height, width) / min(height, width):.0f} exceeds the 200 "
                                        f"Qwen's processor accepts ({height} x {width})")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


PIL_PROCESSOR = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl:Qwen2VLImageProcessorPil"


# what the checkpoints' preprocessor_config.json set: Qwen2/2.5-VL a pixel budget over 14-px patches, CLIP's
# normalisation; Qwen3-VL (and Qwen3.5, which ships the same image processor) edges over 16-px patches, 0.5/0.5
QWEN2_PUBLISHED = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2, **CLIP_NORM}
QWEN3_PUBLISHED = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "merge_size": 2,
                   **HALF_NORM}


@family(ModelType("qwen2_vl", "L2", PIL_PROCESSOR, "mmaudit.models.hf.tiny:tiny_qwen2_vl", QWEN2_PUBLISHED),
        ModelType("qwen2_5_vl", "L2", PIL_PROCESSOR, "mmaudit.models.hf.tiny:tiny_qwen2_5_vl", QWEN2_PUBLISHED),
        # L3: DeepStack re-injects vision features into the decoder's layers
        ModelType("qwen3_vl", "L3", PIL_PROCESSOR, "mmaudit.models.hf.tiny:tiny_qwen3_vl", QWEN3_PUBLISHED),
        ModelType("qwen3_5", "L3", PIL_PROCESSOR, "mmaudit.models.hf.tiny:tiny_qwen3_5", QWEN3_PUBLISHED))
class Qwen2_5_VLAdapter(HFAdapter):
    image_placeholder = "<|image_pad|>"

    def __init__(self, model, tokenizer, image_processor, name: str, level: str | None = None,
                 chat_template: str | None = None, max_pixels: int | None = None) -> None:
        super().__init__(model, tokenizer, image_processor, name, level, chat_template)
        ip = image_processor
        self.patch = int(ip.patch_size)
        self.merge = int(ip.merge_size)
        self.temporal = int(ip.temporal_patch_size)
        size = ip.size
        self.min_pixels = int(setting(size, "shortest_edge") or setting(size, "min_pixels") or 56 * 56)
        self.max_pixels = int(max_pixels or setting(size, "longest_edge") or setting(size, "max_pixels")
                              or 28 * 28 * 1280)
        self.batched_windows = batch_windows(model)  # Qwen2.5-VL's windowed attention: a few calls, not thousands

    @classmethod
    def load_extras(cls, path, max_pixels: int | None = None) -> dict:
        return {"max_pixels": max_pixels} if max_pixels else {}

    @property
    def vision_module(self):
        return self.model.model.visual

    def settings(self) -> dict:
        return super().settings() | {"max_pixels": self.max_pixels}

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        patches, grids, pgrids = [], [], []
        p, m, t = self.patch, self.merge, self.temporal
        for im in images:
            _, h, w = im.shape
            rh, rw = smart_resize(h, w, p * m, self.min_pixels, self.max_pixels)
            x = self.normalise(pil_resize(im, (rh, rw), self.resample))
            gh, gw = rh // p, rw // p
            x = x.reshape(3, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)
            x = x[:, :, :, :, :, None].expand(*x.shape[:5], t, p, p)
            patches.append(x.reshape(gh * gw, 3 * t * p * p))
            grids.append([1, gh, gw])
            pgrids.append(PatchGrid(gh // m, gw // m, h, w))
        grid = torch.tensor(grids, dtype=torch.long, device=images[0].device)
        dtype = self.vision_module.dtype if hasattr(self.vision_module, "dtype") else torch.float32
        return {"pixel_values": torch.cat(patches).to(dtype), "image_grid_thw": grid}, pgrids

    def image_text(self, image_inputs: dict, index: int) -> str:
        return self.image_placeholder * (int(image_inputs["image_grid_thw"][index].prod()) // self.merge**2)

    def fallback_prompt(self, question: str) -> str:
        return (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n"
                f"<|vision_start|>{self.image_placeholder}<|vision_end|>{question}<|im_end|>\n<|im_start|>assistant\n")

    def extra_inputs(self, input_ids: torch.Tensor) -> dict:
        # Qwen's 3D rope needs to know which tokens are image tokens (1) vs text (0).
        return {"mm_token_type_ids": (input_ids == self.image_token_id).int()}

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.vision_module(image_inputs["pixel_values"], grid_thw=image_inputs["image_grid_thw"])
        merged = out.pooler_output if hasattr(out, "pooler_output") else out
        return self._per_image(merged, image_inputs["image_grid_thw"].prod(-1) // self.merge**2)

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        """The ViT's patch states before the patch merger (the merger is Qwen's connector)."""
        out = self.vision_module(image_inputs["pixel_values"], grid_thw=image_inputs["image_grid_thw"])
        return self._per_image(out.last_hidden_state, image_inputs["image_grid_thw"].prod(-1))

    @staticmethod
    def _per_image(flat: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        parts = torch.split(flat, sizes.tolist())
        if len(set(sizes.tolist())) == 1:
            return torch.stack(parts)
        return torch.nn.utils.rnn.pad_sequence(list(parts), batch_first=True)
