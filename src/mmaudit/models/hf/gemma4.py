"""Gemma 4 behind the VLM protocol: aspect-preserving patches, positions in 2-D, k x k pooled soft tokens.

The family processor resizes the image (Pillow's bicubic) to the largest size
whose sides are multiples of ``pooling_kernel_size * patch_size`` and whose
patch count fits ``max_soft_tokens * k^2``, keeps pixels in [0, 1] (no
normalisation by default), cuts ``patch_size`` patches row by row (each
flattened as rows x columns x channels), pads the patch list to its fixed
length with (-1, -1) positions, and the tower average-pools k x k patches into
one soft token, row-major over the pooled grid. The processor writes
begin-of-image, the soft tokens and end-of-image where the chat template puts
the image token; ``mm_token_type_ids`` marks them for the bidirectional image
block.
"""

from __future__ import annotations

import math

import torch

from mmaudit.models.hf.base import HFAdapter
from mmaudit.models.hf.families import ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid


def aspect_preserving_size(h: int, w: int, patch: int, max_patches: int, k: int) -> tuple[int, int]:
    """The processor's target size (its rule, written out): the largest multiples of ``k * patch`` within the
    patch budget; a side that rounds to zero gets one multiple, the other its aspect multiple, capped."""
    target = max_patches * patch**2
    factor = math.sqrt(target / (h * w))
    side = k * patch
    th, tw = int(math.floor(factor * h / side)) * side, int(math.floor(factor * w / side)) * side
    if th == 0 and tw == 0:
        raise ValueError(f"a {h} x {w} image cannot be resized to a multiple of {side}")
    longest = (max_patches // k**2) * side
    if th == 0:
        th, tw = side, min(int(math.floor(w / h)) * side, longest)
    elif tw == 0:
        tw, th = side, min(int(math.floor(h / w)) * side, longest)
    return th, tw


@family(ModelType("gemma4", "L3",
                  "transformers.models.gemma4.image_processing_pil_gemma4:Gemma4ImageProcessorPil",
                  "mmaudit.models.hf.tiny:tiny_gemma4",
                  {"patch_size": 16, "max_soft_tokens": 280, "pooling_kernel_size": 3}))
class Gemma4Adapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        self.patch, self.k = int(ip.patch_size), int(ip.pooling_kernel_size)
        self.max_patches = int(ip.max_soft_tokens) * self.k**2
        self.normalised = bool(getattr(ip, "do_normalize", False))
        self.image_placeholder = tokenizer.convert_ids_to_tokens(self.image_token_id)
        cfg = model.config
        self.boi = tokenizer.convert_ids_to_tokens(int(cfg.boi_token_id))
        self.eoi = tokenizer.convert_ids_to_tokens(int(cfg.eoi_token_id))

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        p, k = self.patch, self.k
        patches, positions, counts, grids = [], [], [], []
        for im in images:
            _, h, w = im.shape
            x = pil_resize(im, aspect_preserving_size(h, w, p, self.max_patches, k), self.resample)
            if self.normalised:
                x = self.normalise(x)
            nh, nw = x.shape[-2] // p, x.shape[-1] // p
            flat = x.reshape(3, nh, p, nw, p).permute(1, 3, 2, 4, 0).reshape(nh * nw, p * p * 3)
            ys, xs = torch.meshgrid(torch.arange(nh), torch.arange(nw), indexing="ij")
            pos = torch.stack([xs, ys], -1).reshape(nh * nw, 2)
            pad = self.max_patches - nh * nw
            patches.append(torch.cat([flat, flat.new_zeros(pad, flat.shape[1])]))
            positions.append(torch.cat([pos, pos.new_full((pad, 2), -1)]))
            counts.append(nh * nw // k**2)
            grids.append(PatchGrid(nh // k, nw // k, h, w))
        dtype = next(self.vision_module.parameters()).dtype
        device = images[0].device
        return {"pixel_values": torch.stack(patches).to(dtype), "image_position_ids": torch.stack(positions).to(device),
                "_soft_tokens": counts}, grids

    def image_text(self, image_inputs: dict, index: int) -> str:
        return f"{self.boi}{self.image_placeholder * image_inputs['_soft_tokens'][index]}{self.eoi}"

    def fallback_prompt(self, question: str) -> str:
        bos = self.tokenizer.bos_token or ""
        return f"{bos}<start_of_turn>user\n{self.image_placeholder}{question}<end_of_turn>\n<start_of_turn>model\n"

    def _inputs(self, enc) -> dict:
        inputs = super()._inputs(enc)
        inputs.pop("_soft_tokens", None)
        return inputs

    def extra_inputs(self, input_ids: torch.Tensor) -> dict:
        return {"mm_token_type_ids": (input_ids == self.image_token_id).long()}

    def _per_image(self, flat: torch.Tensor, counts: list[int]) -> torch.Tensor:
        parts = list(torch.split(flat, counts))
        return torch.nn.utils.rnn.pad_sequence(parts, batch_first=True)

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        """The tower's pooled soft tokens (padding stripped by the tower), per image, before the embedder."""
        out = self.vision_module(pixel_values=image_inputs["pixel_values"],
                                 pixel_position_ids=image_inputs["image_position_ids"])
        return self._per_image(out.last_hidden_state, image_inputs["_soft_tokens"])

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(image_inputs["pixel_values"], image_inputs["image_position_ids"])
        feats = out.pooler_output
        return torch.nn.utils.rnn.pad_sequence(list(feats), batch_first=True) if isinstance(feats, (list, tuple)) \
            else feats
