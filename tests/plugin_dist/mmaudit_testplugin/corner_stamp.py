"""A rendered-text attack that asks for the OCR evidence check: the wrong answer stamped along the top edge in the
image's own text colours (a Typo-Evid placed at the top, declared as content that OCR should still see past)."""

from __future__ import annotations

from dataclasses import dataclass

from mmaudit.pathways import registry
from mmaudit.pathways.text.typo_evid import TypoEvid


@registry.attack("tp_corner_stamp", display="Plugin corner stamp", pathway="text", role="baseline", uses_wrong=True,
                 evidence_check=True)
@dataclass
class CornerStamp(TypoEvid):
    position: str = "top"

    @classmethod
    def from_config(cls, cfg, judge):
        return cls(max_chars=cfg.max_chars, judge=judge)
