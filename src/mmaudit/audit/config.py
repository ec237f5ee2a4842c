"""What an audit is asked to do: its attacks and their parameters, the schedule, the diagnostics' settings.

Everything here is fixed before any model runs; the plan (:mod:`mmaudit.audit.plan`) and every record's key
derive from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mmaudit.errors import UsageError
from mmaudit.judge.match import Judge
from mmaudit.pathways import registry
from mmaudit.pathways.text.editors import ImageEditor, LayoutEditor
from mmaudit.pathways.text.runner import TextRunConfig


@dataclass
class AuditConfig:
    attacks: list[str] = field(default_factory=registry.default_suite)
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
    optimiser: str = "pgd"  # the pixel attacks' step rule: pgd (signed steps of alpha) or apgd (Croce & Hein)
    restarts: int = 1  # runs per sample of each pixel attack, the worst case kept (later ones from random starts)
    end_loss: str = "ce"  # End-PGD's objective: ce (the paper's) or margin (wrong answer's vs the clean answer's)
    # each pixel attack as AutoAttack composes it (the strong preset): its objectives in turn, then Square
    ensemble: bool = False
    eot: int = 1  # each pixel-attack step averages its loss over this many draws of a random defence
    # an attack's own fields set by name ({"end_pgd": {"loss": "margin", "steps": 100}}), after the settings above
    attack_options: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {self.reference!r}")
        from mmaudit.pathways.pixel.base import OPTIMISERS
        from mmaudit.pathways.pixel.end_pgd import LOSSES

        checks = (("--optimiser", self.optimiser, OPTIMISERS), ("--end-pgd-loss", self.end_loss, LOSSES))
        for option, value, allowed in checks:
            if value not in allowed:
                raise UsageError(f"{option} {value!r}: use one of {', '.join(allowed)}")
        if self.restarts < 1:
            raise UsageError(f"--restarts {self.restarts}: at least 1")
        from mmaudit.pathways.attack_options import checked

        self.attack_options = {name: checked(name, opts) for name, opts in self.attack_options.items()}
        for name in self.attacks:
            if not registry.known(name):
                raise UsageError(f"--attacks: unknown attack {name!r}; registered: {', '.join(registry.names())}")
            if registry.spec(name).transfer_only:
                raise UsageError(f"--attacks: {name} is crafted on surrogates, never run white-box; use `mmaudit "
                                 "audit transfer RUN --surrogates SPEC,...`")


REFERENCES = ("label", "self")
MAX_NEW_TOKENS = 16  # the clean pass and every attack's check decode the same length

# "full": every attack on all of C (per-attack ASR exact). "union" (AutoAttack-style): the pixel attacks with a
# union position in its order (End-PGD on C, Vis-PGD on what End-PGD left, MANTIS on what both left). R0, R+ and
# delta are still exact (MANTIS's delta only counts samples its baselines left); the ASR of Vis-PGD and MANTIS
# become lower bounds. Text attacks are cheap and always run on all of C.
SCHEDULES = ("full", "union")


def make_attack(name: str, cfg: AuditConfig, judge: Judge | None = None):
    """The registered attack ``name`` with the config's settings."""
    from mmaudit.pathways.attack_options import apply

    spec = registry.spec(name)
    judge = judge or Judge()
    if spec.pathway == "pixel":
        atk = spec.cls.from_config(cfg, judge, MAX_NEW_TOKENS)
    else:
        atk = spec.cls.from_config(cfg, judge)
    return apply(atk, cfg.attack_options.get(name, {}))


def attack_params(name: str, cfg: AuditConfig) -> dict:
    """What keys an attack's records: its own parameters, plus the text-run settings for text attacks."""
    params = make_attack(name, cfg).params()
    if registry.is_text(name):
        params = params | {"run": asdict(cfg.text)}
    elif cfg.schedule == "union":
        params = params | {"schedule": "union"}
    return params


def attack_order(cfg: AuditConfig) -> list[str]:
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
    if cfg.schedule == "full":
        return list(cfg.attacks)
    union = registry.union_order()
    return [a for a in union if a in cfg.attacks] + [a for a in cfg.attacks if a not in union]
