"""The model-family registry: an adapter file declares the transformers model types it serves.

``@family(ModelType(...), ...)`` on an :class:`~mmaudit.models.hf.base.HFAdapter` subclass says, per model type
(``config.model_type``): its fusion level (FusionAudit's taxonomy; a checkpoint loaded without ``@L1/@L2/@L3`` is
audited at this level), the PIL image processor its checkpoints ship (no torchvision needed) and the builder of a
tiny random-weight test model. :func:`load_hf`, the registry of the paper's models, the parity benchmark and the
protocol tests all read it, so a new family is one new file: in this package (listed under the ``mmaudit.families``
entry points of mmaudit's pyproject) or in any distribution that lists it there (:mod:`mmaudit.plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from mmaudit.models.levels import LEVELS


@dataclass(frozen=True)
class ModelType:
    """One transformers model type an adapter serves."""

    name: str  # config.model_type
    level: str
    processor: str  # the PIL image processor, "module:Class"
    tiny: str | None = None  # "module:function" building (model, tokenizer, image processor[, extra]) offline
    # the image-processor settings its released checkpoints ship (what the pixel-parity test and benchmark hold the
    # adapter to, on real image sizes); None: not declared, which the parity test reports as a failure
    published: dict | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"model type {self.name!r}: level must be one of {LEVELS}, got {self.level!r}")


@dataclass(frozen=True)
class Family:
    model_type: ModelType
    adapter: type

    @property
    def name(self) -> str:
        return self.model_type.name

    @property
    def level(self) -> str:
        return self.model_type.level

    def processor_class(self) -> type:
        return _resolve(self.model_type.processor)

    def tiny_parts(self, seed: int = 0) -> tuple:
        """The tiny test model's (model, tokenizer, image processor, adapter extras)."""
        if self.model_type.tiny is None:
            raise ValueError(f"model type {self.name!r} declares no tiny test model")
        built = _resolve(self.model_type.tiny)(seed=seed)
        return (*built[:3], self.adapter.tiny_extras(built[3:]))

    def tiny(self, seed: int = 0, name: str | None = None):
        """The tiny random-weight model of this type, in its adapter, at its level."""
        model, tokenizer, processor, extras = self.tiny_parts(seed)
        return self.adapter(model, tokenizer, processor, name=name or f"tiny-{self.name}", level=self.level, **extras)


CLIP_NORM = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
HALF_NORM = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}

_REGISTRY: dict[str, Family] = {}


def family(*types: ModelType):
    """Register the decorated adapter class for each of ``types``."""

    def register(cls: type) -> type:
        for t in types:
            _REGISTRY[t.name] = Family(t, cls)
        return cls

    return register


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def families() -> dict[str, Family]:
    """Every registered model type -> its family entry (the built-in adapters imported first)."""
    _load_builtin()
    return dict(_REGISTRY)


def lookup(model_type: str) -> Family | None:
    return families().get(model_type)


def _resolve(spec: str):
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name)


def _load_builtin() -> None:
    """Import the adapter modules the ``mmaudit.families`` entry points name (mmaudit's own and installed
    plugins'): they register their families (:mod:`mmaudit.plugins`)."""
    from mmaudit import plugins

    plugins.load("families")
