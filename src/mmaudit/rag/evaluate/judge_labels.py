"""The blinded support judge's verdicts: four labels, their scores, and what happens to anything else."""

from __future__ import annotations

from mmaudit.rag.evaluate.routers import parse_json
from mmaudit.rag.evaluate.score import LABEL_SCORES

UNPARSED = "uncertain"  # the release records an unreadable verdict as uncertain, scored 0.25


def parse_verdict(raw) -> tuple[str, float, bool]:
    """(label, score, parsed) as the release reads a verdict: the JSON reply's ``label``; anything without
    one of the four labels is ``uncertain`` (0.25) and counted as unparsed. The score is the label's (the
    paper's scale); the release reads the reply's own ``score`` key, which the asked-for JSON keeps equal."""
    d = parse_json(raw) or {}
    label = str(d.get("label", "")).strip().lower()
    if label in LABEL_SCORES:
        return label, LABEL_SCORES[label], True
    return UNPARSED, LABEL_SCORES[UNPARSED], False
