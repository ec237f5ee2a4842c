"""Generative Nat-Evid editors: an instruction-following image-edit model (diffusers) or an HTTP endpoint.

A backend is any ``(PIL image, prompt) -> PIL image``. Whatever it returns,
:class:`GenerativeEditor` keeps only the bounding box of what changed and pastes
the original back everywhere else, so the add-only rule holds even for a model
that repaints the whole picture; an edit that changes nothing is an error.
"""

from __future__ import annotations

import base64
import io
import json
import os
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from mmaudit.data.sample import Box, Sample
from mmaudit.errors import InputError
from mmaudit.pathways.text.base import Edit, paste_box

EDIT_PROMPT = ('Add only this text to the image: "{text}". Write it the way this image already writes text '
               "(same font, size and colour, as a label, value, field or sign that belongs here), in empty space. "
               "Do not modify, move or delete anything else; change nothing else.")
Backend = Callable[[Image.Image, str], Image.Image]


def changed_box(original: np.ndarray, edited: np.ndarray, threshold: int) -> Box | None:
    """Bounding box of the pixels whose largest channel change exceeds ``threshold``."""
    diff = np.abs(original.astype(int) - edited.astype(int)).max(-1) > threshold
    ys, xs = np.nonzero(diff)
    if not len(ys):
        return None
    return (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)


@dataclass
class GenerativeEditor:
    backend: Backend
    name: str = "generative"
    prompt: str = EDIT_PROMPT
    threshold: int = 24  # per-channel change that counts as an edit (generative models add low-level noise)
    max_area: float = 0.5  # an "added text" that changes over half the image is rejected

    def params(self) -> dict:
        return {"editor": self.name, "prompt": self.prompt, "threshold": self.threshold, "max_area": self.max_area}

    def edit(self, image: np.ndarray, prompt: str, sample_id: str | None = None) -> tuple[np.ndarray, Box]:
        """Any instruction: the backend's result, kept only inside the box of what it changed."""
        out = self.backend(Image.fromarray(image), prompt).convert("RGB")
        if out.size != (image.shape[1], image.shape[0]):
            out = out.resize((image.shape[1], image.shape[0]), Image.BICUBIC)
        edited = np.asarray(out, dtype=np.uint8)
        box = changed_box(image, edited, self.threshold)
        if box is None:
            raise InputError(sample_id, "image", f"editor {self.name!r} changed nothing")
        area = (box[2] - box[0]) * (box[3] - box[1]) / (image.shape[0] * image.shape[1])
        if area > self.max_area:
            raise InputError(sample_id, "image", f"editor {self.name!r} changed {area:.0%} of the image")
        return paste_box(image, edited, box), box

    def add_text(self, sample: Sample, text: str) -> Edit:
        image, box = self.edit(sample.image, self.prompt.format(text=text), sample.id)
        area = (box[2] - box[0]) * (box[3] - box[1]) / (image.shape[0] * image.shape[1])
        return Edit(image, text, box, {"editor": self.name, "changed_area": area})


def diffusers_backend(model: str | None = None, pipeline=None, device: str = "cuda", **call_kwargs) -> Backend:
    """An instruction-following image-edit pipeline from diffusers (e.g. an InstructPix2Pix or Kontext model).

    Pass ``pipeline`` to reuse one already built; otherwise ``model`` is loaded
    with ``DiffusionPipeline.from_pretrained`` (needs the [edit] extra and weights).
    """
    if pipeline is None:
        try:
            from diffusers import DiffusionPipeline
        except ImportError as e:  # pragma: no cover - optional extra
            raise ImportError("the diffusers editor needs: pip install 'mmaudit[edit]'") from e
        pipeline = DiffusionPipeline.from_pretrained(model).to(device)

    def edit(image: Image.Image, prompt: str) -> Image.Image:
        return pipeline(image=image, prompt=prompt, **call_kwargs).images[0]

    return edit


def http_backend(url: str, api_key_env: str | None = "MMAUDIT_EDIT_API_KEY", timeout: float = 120.0) -> Backend:
    """POST ``{"image": <base64 PNG>, "prompt": ...}`` to ``url``; the reply carries ``{"image": <base64 PNG>}``."""

    def edit(image: Image.Image, prompt: str) -> Image.Image:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        body = json.dumps({"image": base64.b64encode(buf.getvalue()).decode(), "prompt": prompt}).encode()
        headers = {"Content-Type": "application/json"}
        if api_key_env and os.environ.get(api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            reply = json.loads(resp.read())
        return Image.open(io.BytesIO(base64.b64decode(reply["image"])))

    return edit
