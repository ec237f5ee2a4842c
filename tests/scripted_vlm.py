"""A VLM behind the local OpenAI-compatible server, scripted by what each image it is sent is: a clean image, a
Typo-Evid or Nat-Evid edit of a chosen sample, a masked edit (identified from the audit's own plan and edits)."""

from __future__ import annotations

import base64
import hashlib
import io

import numpy as np
from PIL import Image

from mmaudit.audit.config import AuditConfig, make_attack
from mmaudit.audit.units import EditCache
from mmaudit.cli.audit import plan_audit
from mmaudit.data.synthetic import READING_PROMPT
from mmaudit.pathways.text.base import mask_box

DATA = "synthetic:2"  # six samples, two per family


def digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()


def sent(body: dict) -> tuple[str, str]:
    """(image digest, text prompt) of a request."""
    (msg,) = body["messages"]
    url = next(p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url")
    text = next(p["text"] for p in msg["content"] if p["type"] == "text")
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as im:
        return digest(np.asarray(im.convert("RGB"))), text


class ScriptedVLM:
    """Which image is which, from the audit's own plan and edits; what to answer, from the test's script."""

    def __init__(self, clean_wrong=(), typo_flips=(), nat_flips=(), restores=(), reads=()) -> None:
        plan, _ = plan_audit(DATA, AuditConfig(), wrong_ocr="off")
        self.samples = {s.id: s for s in plan.samples}
        self.images: dict[str, tuple[str, str]] = {}  # digest -> (what, sample id)
        self.overlay: dict[tuple[str, str], str] = {}
        edits = EditCache()
        cfg = AuditConfig()
        for s in plan.samples:
            self.images[digest(s.image)] = ("clean", s.id)
            for name in ("typo_evid", "nat_evid"):
                edit, _, _ = edits.get(make_attack(name, cfg), s)
                self.images[digest(edit.image)] = (name, s.id)
                self.images[digest(mask_box(edit.image, edit.box))] = ("masked", s.id)
                self.overlay[(name, s.id)] = edit.text
        self.clean_wrong, self.restores, self.reads = set(clean_wrong), set(restores), set(reads)
        self.flips = {"typo_evid": set(typo_flips), "nat_evid": set(nat_flips)}

    def __call__(self, body: dict) -> str:
        what, sid = self.images[sent(body)[0]]
        s = self.samples[sid]
        if sent(body)[1] == READING_PROMPT:
            return f"it says {self.overlay[(what, sid)]}" if (what, sid) in self.reads else "I see a picture"
        if what == "clean":
            return "no idea" if sid in self.clean_wrong else s.answer
        if what == "masked":
            return s.answer if sid in self.restores else "no idea"
        return self.overlay[(what, sid)] if sid in self.flips[what] else s.answer


IDS = ["charts-10000-000000", "documents-10000-000000", "scenes-10000-000000", "charts-10000-000001",
       "documents-10000-000001", "scenes-10000-000001"]
