"""A dataset of hostile and odd inputs, for the tests and ``benchmarks/reliability.py``: what a careless or
malicious dataset holds (a decompression bomb, truncated, empty and fake images, a path out of the folder,
wrong JSON types) next to images that are odd but fine (CMYK, 16-bit, palette with transparency, alpha,
animated)."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.data.io import write_samples
from mmaudit.data.synthetic import FAMILIES, synthetic_set

HOSTILE = ("bomb", "truncated", "empty", "text", "escape", "typed")  # rows that must be refused
ODD = ("cmyk", "deep", "palette", "alpha", "anim")  # rows that must be converted, with a note


def bomb_png(width: int = 20000, height: int = 20000) -> bytes:
    """A PNG whose header announces width x height pixels: a few hundred bytes on disk."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    row = b"\x00" + bytes(width)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row * 64, 9)) + \
        chunk(b"IEND", b"")


def png(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def write_hostile(root: Path) -> Path:
    """``root/data/samples.jsonl``: two good samples, the HOSTILE rows, a non-object row and the ODD rows."""
    data = root / "data"
    write_samples(synthetic_set(2, seed=10_000, families=FAMILIES), data)
    rows = (data / "samples.jsonl").read_text().splitlines()
    good = Image.fromarray(np.full((48, 64, 3), 200, np.uint8))
    files = {
        "bomb.png": bomb_png(),
        "truncated.png": png(good)[:60],
        "empty.png": b"",
        "text.png": b"this is not an image at all\n",
        "cmyk.jpg": png(good.convert("CMYK"), "JPEG"),
        "deep.png": png(Image.fromarray(np.full((40, 40), 40000, np.uint16))),
        "palette.png": png(good.convert("P"), transparency=0),
        "alpha.png": png(good.convert("RGBA")),
        "anim.gif": png(good, "GIF", save_all=True, append_images=[good.rotate(90)], duration=50),
    }
    for name, blob in files.items():
        (data / name).write_bytes(blob)
    (root / "outside.png").write_bytes(png(good))
    for name in files:
        rows.append(json.dumps({"id": name.split(".")[0], "image": name, "question": "what ?", "answer": "1"}))
    rows.append(json.dumps({"id": "escape", "image": "../outside.png", "question": "what ?", "answer": "1"}))
    rows.append(json.dumps({"id": "typed", "image": "alpha.png", "question": ["not", "a", "string"],
                            "answer": "1"}))
    rows.append(json.dumps(["a", "list", "row"]))
    (data / "samples.jsonl").write_text("\n".join(rows) + "\n")
    return data
