"""Rendered-text attacks: Typo-Evid's fixed overlay, Nat-Evid's add-only host-style edits, pluggable editors."""

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from PIL import Image, ImageDraw

from mmaudit.data.render import free_rows
from mmaudit.data.sample import Sample
from mmaudit.data.synthetic import FAMILIES, make_sample
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.pathways.text import ImageEditor, LayoutEditor, NatEvid, TypoEvid
from mmaudit.pathways.text.base import changed_outside, is_blank
from mmaudit.pathways.text.generative import GenerativeEditor, http_backend

SAMPLES = [make_sample(f, i, seed=10_000) for f in FAMILIES for i in range(25)]


def as_plain(s: Sample, scale: int = 4) -> Sample:
    """The same question on an upscaled copy without layout metadata: what a real image looks like to an editor."""
    big = np.asarray(Image.fromarray(s.image).resize((64 * scale, 64 * scale), Image.NEAREST))
    return Sample(s.id + "-plain", big, s.question, s.answer, s.answer_type, s.task_family)


@pytest.mark.parametrize("attack", [TypoEvid(), NatEvid()], ids=["typo", "nat"])
def test_edits_are_deterministic_wrong_and_add_only(attack):
    judge = Judge()
    for s in SAMPLES:
        e = attack(s)
        again = attack(s)
        assert np.array_equal(e.image, again.image) and e.box == again.box
        assert changed_outside(s.image, e.image, e.box) == 0, s.id
        assert not np.array_equal(s.image, e.image), f"{s.id}: nothing drawn"
        assert not judge(e.text, s.answer, s.task_family, s.answer_type), f"{s.id}: overlay {e.text!r} is not wrong"


def test_nat_evid_only_writes_into_blank_space_in_the_hosts_style():
    for s in SAMPLES:
        e = NatEvid()(s)
        assert is_blank(s.image, e.box), f"{s.id}: covered content"
        inside = e.image[e.box[1] : e.box[3], e.box[0] : e.box[2]].reshape(-1, 3)
        if s.task_family == "charts":
            ink = next(t.color for t in s.layout.texts if t.role == "label")
            bar = next(tuple(x["color"]) for x in s.layout.shapes if x["kind"] == "bar")
            assert e.style["ink"] == list(ink) and (inside == bar).all(-1).any(), s.id
        elif s.task_family == "documents":
            field = next(t for t in s.layout.texts if t.role == "field" and t.text[:-1] in s.question.upper())
            assert e.style["drawn"] == f"{field.text}{e.text}" and e.style["ink"] == list(field.color), s.id
        else:
            assert e.style["kind"] == "sign"


def test_typo_evid_uses_a_fixed_region_and_cuts_to_l_characters():
    s = next(x for x in SAMPLES if x.task_family == "documents" and len(x.answer) >= 3)
    e = TypoEvid(max_chars=2)(s)
    assert len(e.text) == 2 and e.box == (0, 8 * max(free_rows(s.layout)), 16, 8 * max(free_rows(s.layout)) + 8)
    top = TypoEvid(position="top")(s)
    assert top.box[1] == 8 * min(free_rows(s.layout))
    with pytest.raises(ValueError, match="position"):
        TypoEvid(position="middle")(s)


def test_typo_evid_on_a_plain_image_is_a_band_on_the_edge():
    s = as_plain(SAMPLES[0])
    e = TypoEvid()(s)
    assert e.box[3] == 256 and e.box[0] == 0 and changed_outside(s.image, e.image, e.box) == 0


def test_layout_editor_finds_style_and_space_by_ocr_without_metadata():
    pytest.importorskip("rapidocr")
    from mmaudit.pathways.text.ocr import read_lines, reads

    doc = next(x for x in SAMPLES if x.task_family == "documents" and len(free_rows(x.layout)) >= 3)
    s = as_plain(doc)
    e = LayoutEditor().add_text(s, "7531")
    assert e.style["kind"] == "text line (ocr)" and e.style["ocr_lines"] >= 2
    assert is_blank(s.image, e.box) and changed_outside(s.image, e.image, e.box) == 0
    assert reads(read_lines(e.image), "7531"), "OCR cannot read the inserted line"
    name = doc.question.split()[-2]
    assert e.text.startswith(f"{name}:"), "the host's field form is copied"


def test_no_free_space_is_a_clear_error_naming_the_sample():
    s = make_sample("charts", 0, seed=10_000)
    s.id = "crowded"
    s.layout.free_regions = []
    with pytest.raises(InputError, match="crowded.*no free row"):
        NatEvid()(s)


def _stand_in_model(image: Image.Image, prompt: str) -> Image.Image:
    """A 'generative editor' that writes the text but also repaints every pixel a little and smudges a corner."""
    assert "change nothing else" in prompt
    text = prompt.split('"')[1]
    arr = np.asarray(image).astype(int) + 3  # global low-level drift
    out = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    ImageDraw.Draw(out).text((20, 200), text, fill=(0, 0, 0))
    return out


def test_generative_editor_keeps_only_the_changed_region():
    s = as_plain(SAMPLES[30])
    ed = GenerativeEditor(_stand_in_model, name="stand-in")
    assert isinstance(ed, ImageEditor)
    e = NatEvid(editor=ed)(s)
    assert changed_outside(s.image, e.image, e.box) == 0
    assert e.box[0] >= 20 and e.box[1] >= 195 and (e.box[2] - e.box[0]) < 80
    with pytest.raises(InputError, match="changed nothing"):
        GenerativeEditor(lambda im, p: im, name="noop").add_text(s, "12")
    with pytest.raises(InputError, match="changed 100%"):
        GenerativeEditor(lambda im, p: Image.new("RGB", im.size, (0, 0, 0)), name="blackout").add_text(s, "12")


def test_http_editor_talks_to_an_endpoint():
    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["prompt"] = body["prompt"]
            image = Image.open(io.BytesIO(base64.b64decode(body["image"])))
            out = _stand_in_model(image, body["prompt"])
            buf = io.BytesIO()
            out.save(buf, format="PNG")
            reply = json.dumps({"image": base64.b64encode(buf.getvalue()).decode()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        s = as_plain(SAMPLES[31])
        ed = GenerativeEditor(http_backend(f"http://127.0.0.1:{server.server_port}/edit"), name="http")
        e = ed.add_text(s, "99")
        assert '"99"' in seen["prompt"] and changed_outside(s.image, e.image, e.box) == 0
    finally:
        server.shutdown()
