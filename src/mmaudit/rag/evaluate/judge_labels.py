"""The blinded support judge's verdicts: four labels, their scores, and what happens to anything else."""

from __future__ import annotations

import re

from mmaudit.rag.evaluate.routers import parse_json
from mmaudit.rag.evaluate.score import LABEL_SCORES

UNPARSED = "uncertain"  # an unparseable verdict is recorded as such and scored as uncertain (0.25)


def parse_verdict(raw: str) -> tuple[str, float, bool]:
    """(label, score, parsed): JSON ``{"label": ...}`` first, then a bare label word in the reply."""
    d = parse_json(raw) or {}
    label = str(d.get("label", d.get("verdict", ""))).strip().lower()
    if label not in LABEL_SCORES:
        found = re.findall(r"partially_supported|unsupported|supported|uncertain", str(raw).lower())
        label = found[0] if len(set(found)) == 1 else ""
    if label in LABEL_SCORES:
        return label, LABEL_SCORES[label], True
    return UNPARSED, LABEL_SCORES[UNPARSED], False
