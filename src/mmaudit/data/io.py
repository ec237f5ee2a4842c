"""Samples to and from disk: PNG images plus one JSON line per sample."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.data.images import MAX_PIXELS, inside, load_rgb
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError, json_reason


def layout_json(sample: Sample) -> dict | None:
    if sample.layout is None:
        return None
    lay = sample.layout
    return {
        "size": lay.size,
        "cell": lay.cell,
        "background": lay.background,
        "texts": [asdict(t) for t in lay.texts],
        "shapes": lay.shapes,
        "free_regions": lay.free_regions,
    }


def write_samples(samples: list[Sample], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "images").mkdir(exist_ok=True)
    path = out / "samples.jsonl"
    with path.open("w") as f:
        for s in samples:
            name = f"images/{s.id}.png"
            Image.fromarray(s.image).save(out / name)
            row = {"id": s.id, "image": name, "question": s.question, "answer": s.answer,
                   "answer_type": s.answer_type, "family": s.task_family, "layout": layout_json(s), "meta": s.meta}
            if s.instruction:
                row["instruction"] = s.instruction
            f.write(json.dumps(row) + "\n")
    return path


def read_image(path: Path, sample_id: str, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """An RGB uint8 array, or an :class:`InputError` that names the sample (see :mod:`mmaudit.data.images`)."""
    return load_rgb(path, sample_id, max_pixels=max_pixels)[0]


def iter_jsonl(path: Path, max_pixels: int = MAX_PIXELS):
    """Yield a :class:`Sample` or an :class:`InputError` per row of a JSONL of {id?, image, question, answer,
    answer_type?, family?, instruction?} (``instruction``: the answer-format line shown after the question).

    Image paths are relative to the file and may not leave its folder; a field of the wrong JSON type, a
    decompression bomb (over ``max_pixels``) or an unreadable file is an error. Errors are yielded, not
    raised, so a run can count a bad row and carry on; how an odd image was converted is kept in
    ``meta["input_notes"]``.
    """
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        sid = f"{path.name}:{n}"
        try:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(sid, "line", json_reason(e)) from e
            if not isinstance(row, dict):
                raise InputError(sid, "line", f"expected a JSON object, got {type(row).__name__}")
            sid = str(row.get("id", sid))
            for key in ("image", "question", "answer"):
                if key not in row:
                    raise InputError(sid, key, "missing")
            for key, kinds in (("image", (str,)), ("question", (str,)), ("answer", (str, int, float)),
                               ("answer_type", (str,)), ("family", (str,)), ("instruction", (str,))):
                if key in row and (not isinstance(row[key], kinds) or isinstance(row[key], bool)):
                    raise InputError(sid, key, f"expected {' or '.join(k.__name__ for k in kinds)}, got "
                                               f"{type(row[key]).__name__}")
            image, notes = load_rgb(inside(path.parent, row["image"], sid), sid, max_pixels=max_pixels)
            yield Sample(sid, image, row["question"], str(row["answer"]), row.get("answer_type", "free text"),
                         row.get("family", "custom"), meta={"input_notes": notes} if notes else {},
                         instruction=row.get("instruction", "")).validate()
        except InputError as e:
            yield e


def read_jsonl(path: Path) -> list[Sample]:
    """All samples of a JSONL; the first bad row raises its :class:`InputError`."""
    out = []
    for item in iter_jsonl(path):
        if isinstance(item, InputError):
            raise item
        out.append(item)
    return out
