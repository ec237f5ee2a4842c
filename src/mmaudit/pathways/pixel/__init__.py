"""Pixel pathway of FusionAudit: Vis-PGD and End-PGD (baselines), MANTIS (enhanced)."""

from mmaudit.pathways.pixel.base import AttackResult, PixelAttack
from mmaudit.pathways.pixel.end_pgd import EndPGD
from mmaudit.pathways.pixel.mantis import MANTIS
from mmaudit.pathways.pixel.vis_pgd import VisPGD

ATTACKS: dict[str, type[PixelAttack]] = {"vis_pgd": VisPGD, "end_pgd": EndPGD, "mantis": MANTIS}

__all__ = ["ATTACKS", "AttackResult", "EndPGD", "MANTIS", "PixelAttack", "VisPGD"]
