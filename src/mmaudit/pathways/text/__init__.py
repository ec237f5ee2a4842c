"""Rendered-text pathway of FusionAudit: Typo-Evid (baseline), Nat-Evid (enhanced)."""

from mmaudit.pathways.text.base import Edit, TextAttack
from mmaudit.pathways.text.editors import ImageEditor, LayoutEditor
from mmaudit.pathways.text.nat_evid import NatEvid
from mmaudit.pathways.text.typo_evid import TypoEvid

TEXT_ATTACKS: dict[str, type[TextAttack]] = {"typo_evid": TypoEvid, "nat_evid": NatEvid}

__all__ = ["TEXT_ATTACKS", "Edit", "ImageEditor", "LayoutEditor", "NatEvid",
           "TextAttack", "TypoEvid"]
