"""What an audit is asked to do: its attacks and their parameters, the schedule, the diagnostics' settings.

Everything here is fixed before any model runs; the plan (:mod:`mmaudit.audit.plan`) and every record's key
derive from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mmaudit.judge.match import Judge
from mmaudit.pathways import ORDER
from mmaudit.pathways.pixel import ATTACKS
from mmaudit.pathways.text import TEXT_ATTACKS, LayoutEditor
from mmaudit.pathways.text.editors import ImageEditor
from mmaudit.pathways.text.runner import TextRunConfig


@dataclass
class AuditConfig:
    attacks: list[str] = field(default_factory=lambda: list(ORDER))
    eps: float = 8 / 255
    steps: int = 40
    alpha: float | None = None
    seed: int = 0
    batch: int = 32
    early_stop: bool = True
    downscale: int | None = None
    verify_reload: bool = True
    typo_position: str = "bottom"
    max_chars: int = 16
    editor: ImageEditor = field(default_factory=LayoutEditor)
    text: TextRunConfig = field(default_factory=TextRunConfig)
    schedule: str = "full"  # "union": each pixel attack only on what earlier ones left (see SCHEDULES)
    recovery: int = 40  # first N End-PGD flips per model; 0 turns layer recovery off
    recovery_positions: str = "image"
    ocr_limit: int = 48  # samples for the OCR evidence check; 0 turns it off
    reference: str = "label"  # "self": flips are judged against the model's own clean answer (a label-free audit)

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {self.reference!r}")


REFERENCES = ("label", "self")
MAX_NEW_TOKENS = 16  # the clean pass and every attack's check decode the same length

# "full": every attack on all of C (per-attack ASR exact). "union" (AutoAttack-style): End-PGD
# on C, Vis-PGD on what End-PGD left, MANTIS on what both left. R0, R+ and delta are still
# exact (MANTIS's delta only counts samples its baselines left); the ASR of Vis-PGD and
# MANTIS become lower bounds. Text attacks are cheap and always run on all of C.
SCHEDULES = ("full", "union")
UNION_ORDER = ("end_pgd", "vis_pgd", "mantis")


def make_attack(name: str, cfg: AuditConfig, judge: Judge | None = None):
    judge = judge or Judge()
    if name in ATTACKS:
        return ATTACKS[name](eps=cfg.eps, steps=cfg.steps, alpha=cfg.alpha, seed=cfg.seed, early_stop=cfg.early_stop,
                             downscale=cfg.downscale, max_new_tokens=MAX_NEW_TOKENS, judge=judge)
    if name == "typo_evid":
        return TEXT_ATTACKS[name](max_chars=cfg.max_chars, judge=judge, position=cfg.typo_position)
    if name == "nat_evid":
        return TEXT_ATTACKS[name](max_chars=cfg.max_chars, judge=judge, editor=cfg.editor)
    raise ValueError(f"unknown attack {name!r}; choose from {ORDER}")


def attack_params(name: str, cfg: AuditConfig) -> dict:
    """What keys an attack's records: its own parameters, plus the text-run settings for text attacks."""
    params = make_attack(name, cfg).params()
    if name in TEXT_ATTACKS:
        params = params | {"run": asdict(cfg.text)}
    elif cfg.schedule == "union":
        params = params | {"schedule": "union"}
    return params


def attack_order(cfg: AuditConfig) -> list[str]:
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
    if cfg.schedule == "full":
        return list(cfg.attacks)
    return [a for a in UNION_ORDER if a in cfg.attacks] + [a for a in cfg.attacks if a not in UNION_ORDER]
