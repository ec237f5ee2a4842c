"""A VLM behind the local OpenAI-compatible server, scripted by what each image it is sent is: a clean image, a
Typo-Evid or Nat-Evid edit of a chosen sample, a masked edit (identified from the audit's own plan and edits)."""

from __future__ import annotations

import base64
import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from mmaudit.audit.config import AuditConfig, make_attack
from mmaudit.audit.units import EditCache
from mmaudit.cli.audit import plan_audit
from mmaudit.data.synthetic import READING_PROMPT
from mmaudit.models.chat.local_server import reply_for
from mmaudit.models.chat.probe import CANARY_PROMPT, canary_image, probe_messages
from mmaudit.pathways.text.base import mask_box

DATA = "synthetic:2"  # six samples, two per family


def digest(image: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()


CANARY = 4321  # the canary's number in these tests (see fixed_canary)


@pytest.fixture(autouse=True)
def fixed_canary(monkeypatch):
    """The image canary shows CANARY, which the scripted VLM reads (a test module imports this fixture)."""
    monkeypatch.setattr("mmaudit.models.chat.probe.draw_number", lambda: CANARY)


def work(server) -> dict:
    """The server's completed requests without the endpoint probe's (sent again by every run, by design)."""
    probes = {reply_for(probe_messages(image)) for image in (False, True)}
    return {k: n for k, n in server.completed.items() if k not in probes}


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
        self.images[digest(canary_image(CANARY)[0])] = ("canary", "")
        self.images[digest(canary_image(1234)[0])] = ("probe", "")  # the image probe (probe_messages)
        self.clean_wrong, self.restores, self.reads = set(clean_wrong), set(restores), set(reads)
        self.flips = {"typo_evid": set(typo_flips), "nat_evid": set(nat_flips)}

    def what(self, body: dict) -> tuple[str, str]:
        """(what the image is, its sample id): ("probe", "") for the endpoint probe's requests, ("unknown", "") for
        an image the script does not know (another model's adversarial image, say)."""
        if isinstance(body["messages"][0]["content"], str):
            return "probe", ""
        return self.images.get(sent(body)[0], ("unknown", ""))

    def __call__(self, body: dict) -> str:
        what, sid = self.what(body)
        prompt = "" if what == "probe" else sent(body)[1]
        if what == "probe":  # the text probes ask for {"answer": "yes"}; the image probe for OK
            return '{"answer": "yes"}' if isinstance(body["messages"][0]["content"], str) else "OK"
        if what == "canary":
            return str(CANARY) if prompt == CANARY_PROMPT else "a number"
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
