"""Nat-Evid: the same wrong answer, fixed before editing, drawn as content consistent with the host.

Which editor draws it is a parameter (:class:`~mmaudit.pathways.text.editors.ImageEditor`):
the embedded :class:`LayoutEditor` by default, or a generative one
(:mod:`mmaudit.pathways.text.generative`) for users with a GPU or an API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mmaudit.data.sample import Sample
from mmaudit.pathways.text.base import Edit, TextAttack
from mmaudit.pathways.text.editors import ImageEditor, LayoutEditor


@dataclass
class NatEvid(TextAttack):
    name: ClassVar[str] = "nat_evid"
    editor: ImageEditor = field(default_factory=LayoutEditor)

    def params(self) -> dict:
        return super().params() | self.editor.params()

    def edit(self, sample: Sample, text: str) -> Edit:
        return self.editor.add_text(sample, text)
