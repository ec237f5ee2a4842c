"""A white-box model behind a delivery channel and a defence (:mod:`mmaudit.models.transforms`).

``ChannelVLM(vlm, pipeline)`` is itself a VLM: every answer (``generate``, the verdict on every flip) is the
model's on the *real* transform's output; every differentiable call (``score``, ``vision_features``) shows the
model the same real output in the forward pass while the gradient flows through the stand-ins (BPDA; straight
through where a step has none). So an attack through it is adaptive by default, and a perturbation that fools
only a stand-in never counts. Random steps draw from a generator seeded by the image's bytes and the call's
number, so a verdict is reproducible and every ``--eot`` draw is a new one.

The pipeline is part of the model: its name (``zoo-L1~jpeg:75``), its level (``L1~jpeg:75``: the level tables
keep a pipeline's figures apart from the bare model's), its fingerprint (hence every record's key) and its
settings (the run record, the report's title lines), which also name the bare model it wraps: the audit judges
that model's own perturbations through the pipeline (the non-adaptive column).

``ChannelTarget`` is the same for a black-box endpoint (what an API does to uploads): it only answers, each image
sent as the pipeline's real output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from mmaudit.models.transforms import Pipeline
from mmaudit.models.vlm import check_batch
from mmaudit.store import key_of

SEPARATOR = "~"  # between a model's name and its pipeline's


def image_seed(x: torch.Tensor, call: int) -> int:
    digest = hashlib.blake2b((x.detach().clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy().tobytes(),
                             digest_size=8).digest()
    return (int.from_bytes(digest, "little") + call * 1_000_003) % 2**63


class ChannelTarget:
    """A model (white-box or an endpoint) that is shown every image through ``pipeline``'s real transforms."""

    def __init__(self, vlm, pipeline: Pipeline) -> None:
        self.inner, self.pipeline = vlm, pipeline
        spec = "+".join(t.spec for t in pipeline.steps)
        self.name, self.level = f"{vlm.name}{SEPARATOR}{spec}", f"{vlm.level}{SEPARATOR}{spec}"
        self.fingerprint = key_of(kind="channel", model=vlm.fingerprint, **pipeline.describe())

    def __getattr__(self, attr):  # anything else the adapter offers (its processor, its model type, its cache, ...)
        if attr == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def settings(self) -> dict:
        return self.inner.settings() | self.pipeline.describe() | {"bare_model": self.inner.name,
                                                                   "bare_fingerprint": self.inner.fingerprint}

    def _real(self, images, prompts) -> list[torch.Tensor]:
        return [self.pipeline.real(x, torch.Generator().manual_seed(image_seed(x, 0)))
                for x in check_batch(images, prompts)]

    def generate(self, images, prompts: list[str], max_new_tokens: int = 16) -> list[str]:
        return self.inner.generate(self._real(images, prompts), prompts, max_new_tokens)

    def generate_scored(self, images, prompts: list[str], max_new_tokens: int = 16):
        """An endpoint's reply with its log-probabilities (black-box Square), on the real output."""
        return self.inner.generate_scored(self._real(images, prompts), prompts, max_new_tokens)


class ChannelVLM(ChannelTarget):
    """A white-box model behind ``pipeline``: answers on the real output, gradients through the stand-ins."""

    def __init__(self, vlm, pipeline: Pipeline) -> None:
        super().__init__(vlm, pipeline)
        self.device, self.dtype = vlm.device, vlm.dtype
        self.calls = 0

    @property
    def decoder_layers(self):
        return self.inner.decoder_layers

    def _adaptive(self, images, prompts) -> list[torch.Tensor]:
        self.calls += 1
        return [self.pipeline.adaptive(x, torch.Generator().manual_seed(image_seed(x, self.calls)))
                for x in check_batch(images, prompts)]

    def score(self, images, prompts: list[str], answers: list[str]):
        return self.inner.score(self._adaptive(images, prompts), prompts, answers)

    def vision_features(self, images, stage: str = "encoder"):
        ims = images if isinstance(images, (list, tuple)) else list(images.unbind(0))
        return self.inner.vision_features(self._adaptive(ims, ["(image)"] * len(ims)), stage=stage)

    def answer_tokens(self, answer: str) -> list[int]:
        return self.inner.answer_tokens(answer)

    def image_positions(self, images, prompts: list[str]):
        return self.inner.image_positions(self._real(images, prompts), prompts)

    def patch_grid(self, image: torch.Tensor):
        return self.inner.patch_grid(self._real([image], ["(image)"])[0])

    def hidden_states(self, images, prompts: list[str]):
        return self.inner.hidden_states(self._real(images, prompts), prompts)

    def attentions(self, images, prompts: list[str], layers: Sequence[int] | None = None):
        return self.inner.attentions(self._real(images, prompts), prompts, layers)

    def generate_patched(self, images, prompts: list[str], layer: int, values, max_new_tokens: int = 9, **kw):
        return self.inner.generate_patched(self._real(images, prompts), prompts, layer, values, max_new_tokens, **kw)


def with_pipeline(spec: str, channel: str | None, defence: str | None) -> str:
    """A model spec that carries its pipeline (``zoo:L1#channel=jpeg:75``): what a Ray actor loads by."""
    return spec + (f"#channel={channel}" if channel else "") + (f"#defence={defence}" if defence else "")


def behind(vlm, pipeline: Pipeline) -> ChannelTarget:
    """``vlm`` behind ``pipeline``: white-box (adaptive attacks) or, for a model that only answers, a target."""
    from mmaudit.models.vlm import VLM

    return ChannelVLM(vlm, pipeline) if isinstance(vlm, VLM) else ChannelTarget(vlm, pipeline)


def split_pipeline(spec: str) -> tuple[str, Pipeline | None]:
    """(the bare model spec, its pipeline or None)."""
    base, *parts = spec.split("#")
    given = dict(p.partition("=")[::2] for p in parts)
    return base, Pipeline.of(given.get("channel"), given.get("defence"))
