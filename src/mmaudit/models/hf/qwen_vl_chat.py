"""Qwen-VL-Chat behind the VLM protocol, on the native implementation (:mod:`mmaudit.models.hf.qwen_vl`).

Preprocessing as the release does it: a 448 x 448 bicubic resize (Pillow's filter, reproduced in torch) and CLIP
normalisation. The prompt is the release's ChatML context (``make_context``) for "Picture 1: <img>...</img>\\n"
and the question; the 256 positions between ``<img>`` and ``</img>`` carry the resampler's output, and they are
the image positions layer recovery patches. Vis-PGD's encoder features are the ViT's patch outputs; the
connector stage is the resampler's 256 positions after ``ln_post`` and ``proj``. For OAR the text-to-image
attention is carried through the resampler as BLIP-2's is through its Q-Former: text -> image-position attention
in the language model times the resampler's query -> patch cross-attention (heads averaged), which gives a
(text, patch) map on the ViT's patch grid.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from mmaudit.models.hf.base import HFAdapter
from mmaudit.models.hf.families import CLIP_NORM, ModelType, family
from mmaudit.models.hf.resample import pil_resize
from mmaudit.models.vlm import PatchGrid


@family(ModelType("qwen", "L2", "mmaudit.models.hf.qwen_vl.processor:QWenVLImageProcessor",
                  "mmaudit.models.hf.qwen_vl.tiny:tiny_qwen_vl", {"image_size": 448, "resample": 3, **CLIP_NORM}))
class QwenVLChatAdapter(HFAdapter):
    image_placeholder = "<img>"

    @classmethod
    def load_parts(cls, path: str | Path, dtype: str = "auto", device_map=None) -> tuple:
        from transformers.utils import cached_file

        from mmaudit.models.hf.qwen_vl.model import QWenLMHeadModel
        from mmaudit.models.hf.qwen_vl.processor import QWenVLImageProcessor
        from mmaudit.models.hf.qwen_vl.tokenizer import VOCAB_FILE, QWenTokenizer

        model = QWenLMHeadModel.from_pretrained(path, dtype=dtype, device_map=device_map)
        tokenizer = QWenTokenizer(cached_file(str(path), VOCAB_FILE))
        return model, tokenizer, QWenVLImageProcessor.from_pretrained(path)

    def configure(self, model, tokenizer, ip) -> None:
        self.size = (ip.image_size, ip.image_size)
        v = model.config.visual
        self.grid = (v["image_size"] // v["patch_size"],) * 2

    def _eos_id(self) -> int:
        return int(self.tokenizer.im_end_id)  # a ChatML reply ends its turn (the release stops there too)

    @property
    def visual(self):
        """The vision side: the ViT and the resampler after it."""
        return self.model.transformer.visual

    @property
    def vision_module(self):
        return self.visual.transformer  # the ViT's blocks: what emits the patch features

    @property
    def decoder_layers(self):
        return list(self.model.transformer.h)

    @property
    def image_token_id(self) -> int:
        return int(self.tokenizer.img_pad_id)

    def settings(self) -> dict:
        return {"activation_checkpointing": self.activation_checkpointing, "attention": "eager"}

    @contextmanager
    def eager_attention(self) -> Iterator[None]:
        yield  # always eager: its weights are at hand

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        out = [self.normalise(pil_resize(im, self.size, self.resample)) for im in images]
        grids = [PatchGrid(*self.grid, im.shape[-2], im.shape[-1]) for im in images]
        return {"pixel_values": self.pixel_batch(out)}, grids

    def prompt_ids(self, question: str, image_inputs: dict, index: int) -> list[int]:
        return self.tokenizer.chat_ids(question)

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        return self.visual.patches(image_inputs["pixel_values"])

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        return self.visual(image_inputs["pixel_values"])

    def attentions(self, images, prompts: list[str], layers: Sequence[int] | None = None) -> list[torch.Tensor]:
        n = len(self.decoder_layers)
        layers = list(layers) if layers is not None else list(range(n // 2, n))
        enc = self.encode(images, prompts)
        with torch.no_grad():
            out = self.model(**self._inputs(enc), output_attentions=True, use_cache=False)
            _, to_patch = self.visual(enc.image_inputs["pixel_values"], weights=True)  # (B, Q, P)
        text_att = torch.stack([out.attentions[i].float() for i in layers]).mean(0).mean(1)  # (B, S, S)
        result = []
        for b in range(len(prompts)):
            img = torch.nonzero(enc.input_ids[b] == self.image_token_id).flatten()
            after = torch.arange(int(img.max()) + 2, enc.input_ids.shape[1], device=text_att.device)  # past </img>
            result.append(text_att[b][after][:, img] @ to_patch[b].float().to(text_att.device))
        return result
