"""OCR through rapidocr (its PP-OCR models ship inside the wheel, so this works offline).

Used twice: by the embedded editor to find a host's text style and free space
on images without layout metadata, and by the evidence-preservation check
("does OCR still read the ground truth after the edit?").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mmaudit.data.sample import Box


@dataclass(frozen=True)
class OcrLine:
    text: str
    box: Box  # axis-aligned hull of the detected quadrilateral
    score: float


@lru_cache(maxsize=1)
def _engine():
    quiet = logging.getLogger("RapidOCR")  # rapidocr logs every model load at INFO on its own handler;
    if not quiet.handlers:  # one that is already there (ours, errors only) keeps it from adding it
        handler = logging.StreamHandler()
        handler.setLevel(logging.ERROR)
        quiet.addHandler(handler)
    try:
        from rapidocr import RapidOCR
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise ImportError("OCR needs the [ocr] extra: pip install 'mmaudit[ocr]'") from e
    return RapidOCR()


def ocr_available() -> bool:
    try:
        import rapidocr  # noqa: F401
    except ImportError:
        return False
    return True


def read_lines(image: np.ndarray) -> list[OcrLine]:
    """Text lines of an RGB uint8 image, top to bottom."""
    res = _engine()(np.ascontiguousarray(image))
    if res.boxes is None or res.txts is None:
        return []
    out = []
    for quad, text, score in zip(res.boxes, res.txts, res.scores):
        q = np.asarray(quad)
        box = (int(q[:, 0].min()), int(q[:, 1].min()), int(np.ceil(q[:, 0].max())), int(np.ceil(q[:, 1].max())))
        out.append(OcrLine(str(text), box, float(score)))
    return sorted(out, key=lambda ln: (ln.box[1], ln.box[0]))


def squash(text: str) -> str:
    """Lower case without spaces: OCR splits '3120' into '3 120' on small glyphs."""
    return "".join(str(text).lower().split())


def reads(lines: list[OcrLine], truth: str) -> bool:
    """Whether any OCR line contains ``truth``."""
    t = squash(truth)
    return bool(t) and any(t in squash(ln.text) for ln in lines)
