"""The image-pollution operators' shared shapes: what goes in, what comes out, and its fingerprint.

An operator is ``op(item, ctx) -> Polluted``. ``item`` is one clean image
evidence of a question; ``ctx`` carries what some operators need (the other
questions' images as donors, a false claim, the random generator). Every
result records its parameters and a hash of its output pixels and metadata,
as the construction checks require.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ImageItem:
    """A clean image evidence item of one question."""

    qid: str
    question: str
    subject: str
    image: np.ndarray  # (H, W, 3) uint8
    alt_text: str = ""
    title: str = ""
    page_url: str = ""
    image_url: str = ""


@dataclass
class OpContext:
    donors: list[ImageItem] = field(default_factory=list)  # images of other questions
    false_claim: str = ""  # a concise false statement about the subject
    false_caption: str = ""
    false_target: str = ""  # a false concept for the adversarial patch
    seed: int = 0

    def rng(self, *keys: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, *(int(hashlib.sha1(k.encode()).hexdigest()[:8], 16) for k in keys)])

    def donor_for(self, item: ImageItem, salt: str) -> ImageItem:
        pool = [d for d in self.donors if d.qid != item.qid]
        if not pool:
            raise ValueError(f"question {item.qid}: no donor image from another question")
        return pool[int(self.rng(item.qid, salt).integers(len(pool)))]


@dataclass
class Polluted:
    attack: str
    image: np.ndarray
    alt_text: str
    title: str
    method: str
    prompt: str = ""  # the manipulation prompt / claim / target recorded with the item
    donor_qid: str = ""
    rationale: str = ""
    params: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256(np.ascontiguousarray(self.image).tobytes())
        h.update(json.dumps([self.attack, self.alt_text, self.title, self.prompt, self.donor_qid, self.params],
                            sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]


def resize_to(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    if image.shape[:2] == shape:
        return image
    return np.array(Image.fromarray(image).resize((shape[1], shape[0]), Image.BICUBIC))
