"""Pixel pathway of FusionAudit: Vis-PGD and End-PGD (baselines), MANTIS (enhanced), the surrogate-ensemble
transfer attack (crafted without the target by `mmaudit audit transfer`) and Square (gradient-free, white-box or
black-box); each registers itself (:mod:`mmaudit.pathways.registry`)."""

from mmaudit.pathways.pixel.base import AttackResult, PixelAttack
from mmaudit.pathways.pixel.end_pgd import EndPGD
from mmaudit.pathways.pixel.mantis import MANTIS
from mmaudit.pathways.pixel.square_attack import SquareAttack
from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble
from mmaudit.pathways.pixel.vis_pgd import VisPGD

__all__ = ["AttackResult", "EndPGD", "MANTIS", "PixelAttack", "SquareAttack", "SurrogateEnsemble", "VisPGD"]
