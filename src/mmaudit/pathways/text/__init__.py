"""Rendered-text pathway of FusionAudit: Typo-Evid (baseline), Nat-Evid (enhanced); each registers itself
(:mod:`mmaudit.pathways.registry`)."""

from mmaudit.pathways.text.base import Edit, TextAttack
from mmaudit.pathways.text.editors import ImageEditor, LayoutEditor
from mmaudit.pathways.text.nat_evid import NatEvid
from mmaudit.pathways.text.typo_evid import TypoEvid

__all__ = ["Edit", "ImageEditor", "LayoutEditor", "NatEvid",
           "TextAttack", "TypoEvid"]
