"""SmolVLM (Idefics3-based) behind the VLM protocol: the image is resized, split into tiles, plus a global view.

Preprocessing follows the family processor, in torch, with Pillow's Lanczos
resampling reproduced exactly: resize so the longest edge is
``size["longest_edge"]`` (the other side truncated, then made even; at most
4096), resize again so both sides are multiples of the encoder's tile size M,
cut M x M tiles row by row and add the whole image squeezed to M x M as the
global view (an image no larger than M is one frame); normalise. Each frame
becomes ``image_seq_len`` tokens after the pixel-shuffle connector; the prompt
spells the tiles out with their ``<row_r_col_c>`` markers where the chat
template writes the image token.
"""

from __future__ import annotations

import math

import torch

from mmaudit.models.hf.base import HFAdapter, setting
from mmaudit.models.hf.families import HALF_NORM, ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid, TiledGrid

MAX_SIDE = 4096  # the processor's absolute cap on a side


def longest_edge_size(h: int, w: int, max_len: int) -> tuple[int, int]:
    """The processor's resize target: longest side ``max_len``, the other truncated and made even, then both
    scaled below ``MAX_SIDE``."""
    aspect = w / h
    if w >= h:
        w, h = max_len, int(max_len / aspect)
        h += h % 2
    else:
        h, w = max_len, int(max_len * aspect)
        w += w % 2
    h, w = max(h, 1), max(w, 1)
    aspect = w / h
    if w >= h and w > MAX_SIDE:
        w, h = MAX_SIDE, int(MAX_SIDE / aspect)
    elif h > w and h > MAX_SIDE:
        h, w = MAX_SIDE, int(MAX_SIDE * aspect)
    return max(h, 1), max(w, 1)


def multiple_of(h: int, w: int, m: int) -> tuple[int, int]:
    aspect = w / h
    if w >= h:
        w = math.ceil(w / m) * m
        h = math.ceil(int(w / aspect) / m) * m
    else:
        h = math.ceil(h / m) * m
        w = math.ceil(int(h * aspect) / m) * m
    return h, w


@family(ModelType("smolvlm", "L1",
                  "transformers.models.smolvlm.image_processing_pil_smolvlm:SmolVLMImageProcessorPil",
                  "mmaudit.models.hf.tiny:tiny_smolvlm",
                  {"size": {"longest_edge": 1536}, "max_image_size": {"longest_edge": 384}, "resample": 1,
                   **HALF_NORM}))
class SmolVLMAdapter(HFAdapter):

    def configure(self, model, tokenizer, ip) -> None:
        self.longest = int(setting(ip.size, "longest_edge"))
        self.tile = int(setting(ip.max_image_size, "longest_edge"))
        self.split = bool(getattr(ip, "do_image_splitting", True))
        cfg = model.config
        side = self.tile // int(cfg.vision_config.patch_size) // int(cfg.scale_factor)
        self.side, self.seq_len = side, side * side

    @property
    def vision_module(self):
        return self.model.model.vision_model

    @property
    def decoder_layers(self):
        return list(self.model.model.text_model.layers)

    def _resize(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        return pil_resize(x, size, self.resample)  # 8-bit and clamped, as each Pillow resize returns

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        m = self.tile
        batches, grids, layout = [], [], []
        for im in images:
            _, h, w = im.shape
            x = self._resize(im, longest_edge_size(h, w, self.longest))
            if self.split:
                x = self._resize(x, multiple_of(*x.shape[-2:], m))
            rh, rw = x.shape[-2:]
            frames, tiles = [], []
            rows = cols = 0
            if self.split and (rh > m or rw > m):
                rows, cols = rh // m, rw // m
                sy, sx = h / rh, w / rw
                for r in range(rows):
                    for c in range(cols):
                        frames.append(x[:, r * m : (r + 1) * m, c * m : (c + 1) * m])
                        tiles.append(PatchGrid(self.side, self.side, m * sy, m * sx, c * m * sx, r * m * sy))
                frames.append(self._resize(x, (m, m)))
            else:
                frames.append(self._resize(x, (m, m)))
            tiles.append(PatchGrid(self.side, self.side, h, w))
            batches.append(torch.stack([self.normalise(f) for f in frames]))
            grids.append(TiledGrid(tiles, h, w))
            layout.append((rows, cols))
        n = max(len(b) for b in batches)
        pixel = torch.zeros(len(batches), n, 3, m, m, device=images[0].device)
        mask = torch.zeros(len(batches), n, m, m, dtype=torch.bool, device=images[0].device)
        for i, b in enumerate(batches):
            pixel[i, : len(b)] = b
            mask[i, : len(b)] = True
        dtype = next(self.vision_module.parameters()).dtype
        return {"pixel_values": pixel.to(dtype), "pixel_attention_mask": mask, "_layout": layout}, grids

    @property
    def image_placeholder(self) -> str:
        return self.tokenizer.convert_ids_to_tokens(self.image_token_id)

    def image_text(self, image_inputs: dict, index: int) -> str:
        rows, cols = image_inputs["_layout"][index]
        fake, glob = "<fake_token_around_image>", "<global-img>"
        image = self.image_placeholder * self.seq_len
        if rows == cols == 0:
            return f"{fake}{glob}{image}{fake}"
        text = "".join("".join(f"{fake}<row_{r + 1}_col_{c + 1}>{image}" for c in range(cols)) + "\n"
                       for r in range(rows))
        return f"{text}\n{fake}{glob}{image}{fake}"

    def fallback_prompt(self, question: str) -> str:
        return f"<|im_start|>User:{self.image_placeholder}{question}<end_of_utterance>\nAssistant:"

    def _inputs(self, enc) -> dict:
        inputs = super()._inputs(enc)
        inputs.pop("_layout", None)
        return inputs

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"],
                                            pixel_attention_mask=image_inputs["pixel_attention_mask"])
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        if isinstance(feats, (list, tuple)):
            feats = torch.cat(list(feats))
        b = image_inputs["pixel_values"].shape[0]
        return feats.reshape(b, -1, feats.shape[-1])

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        """The SigLIP tower's patches of every tile and the global view, before the pixel-shuffle connector."""
        out = self.model.get_image_features(pixel_values=image_inputs["pixel_values"],
                                            pixel_attention_mask=image_inputs["pixel_attention_mask"])
        feats = out.last_hidden_state
        b = image_inputs["pixel_values"].shape[0]
        return feats.reshape(b, -1, feats.shape[-1])
