"""Nat-Evid: the same wrong answer, fixed before editing, drawn as content consistent with the host.

Which editor draws it is a parameter (:class:`~mmaudit.pathways.text.editors.ImageEditor`):
the embedded :class:`LayoutEditor` by default, or a generative one
(:mod:`mmaudit.pathways.text.generative`) for users with a GPU or an API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.pathways.registry import attack
from mmaudit.pathways.text.base import Edit, TextAttack
from mmaudit.pathways.text.editors import ImageEditor, LayoutEditor


@attack("nat_evid", display="Nat-Evid", pathway="text", role="enhanced", enhances=("typo_evid",), uses_wrong=True,
        default=True, table_position=4, evidence_check=True)
@dataclass
class NatEvid(TextAttack):
    editor: ImageEditor = field(default_factory=LayoutEditor, metadata={"key": "merge"})

    @classmethod
    def from_config(cls, cfg: Any, judge: Judge) -> NatEvid:
        return cls(max_chars=cfg.max_chars, judge=judge, editor=cfg.editor)

    def edit(self, sample: Sample, text: str) -> Edit:
        return self.editor.add_text(sample, text)
