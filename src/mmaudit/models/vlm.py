"""The target protocols, answers only (:class:`Target`) and white-box (:class:`VLM`), and the helpers adapters share.

Attacks and diagnostics talk only to this surface, never to a model family:

* inputs are raw RGB pixels in [0, 1] (the epsilon-ball lives in image space);
  any resize/normalise/patchify happens inside the adapter, in torch;
* ``score`` gives teacher-forced logits for a given answer (differentiable), so
  End-PGD and MANTIS can be written once; no classifier-style (N, C) logits;
* decoder layers are exposed as modules, and :func:`capture_hidden` /
  :func:`replace_hidden` hook their outputs directly (transformers' ``hidden_states``
  outputs would not show a patched value);
* ``attentions`` returns text-to-image attention with the patch grid that maps
  an image region to patch indices (OAR).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from mmaudit.errors import InputError
from mmaudit.models.levels import Level


@dataclass
class AnswerScores:
    """Teacher-forced scores of one answer per sample (right-padded over tokens)."""

    logits: torch.Tensor  # (B, T, V) logits that predict each answer token
    targets: torch.Tensor  # (B, T) answer token ids
    mask: torch.Tensor  # (B, T) True where a real answer token is

    def token_logprobs(self) -> torch.Tensor:
        lp = self.logits.float().log_softmax(-1).gather(-1, self.targets.unsqueeze(-1)).squeeze(-1)
        return lp * self.mask

    def sequence_logprob(self) -> torch.Tensor:
        return self.token_logprobs().sum(-1)


@dataclass(frozen=True)
class PatchGrid:
    """How image tokens tile the raw input image: ``rows x cols`` cells, row-major, over the
    ``height x width`` window at (``x0``, ``y0``) (the whole image unless the family crops)."""

    rows: int
    cols: int
    height: float
    width: float
    x0: float = 0.0
    y0: float = 0.0

    @property
    def n_tokens(self) -> int:
        return self.rows * self.cols

    def patch_box(self, index: int) -> tuple[float, float, float, float]:
        r, c = divmod(index, self.cols)
        ph, pw = self.height / self.rows, self.width / self.cols
        return (self.x0 + c * pw, self.y0 + r * ph, self.x0 + (c + 1) * pw, self.y0 + (r + 1) * ph)

    def region_to_patches(self, box: Sequence[float], min_overlap: float = 0.0) -> list[int]:
        """Indices of patches whose area overlaps ``box`` (x0, y0, x1, y1) by more than ``min_overlap``."""
        x0, y0, x1, y1 = box
        out = []
        for i in range(self.n_tokens):
            px0, py0, px1, py1 = self.patch_box(i)
            ix = max(0.0, min(x1, px1) - max(x0, px0))
            iy = max(0.0, min(y1, py1) - max(y0, py0))
            if ix * iy > min_overlap * (px1 - px0) * (py1 - py0) and ix > 0 and iy > 0:
                out.append(i)
        return out


class TiledGrid(PatchGrid):
    """Image tokens of several grids in sequence (tiles of a split image, then the global view)."""

    def __init__(self, grids: Sequence[PatchGrid], height: float, width: float) -> None:
        object.__setattr__(self, "grids", tuple(grids))
        super().__init__(rows=1, cols=sum(g.n_tokens for g in grids), height=height, width=width)

    @property
    def n_tokens(self) -> int:
        return sum(g.n_tokens for g in self.grids)

    def patch_box(self, index: int) -> tuple[float, float, float, float]:
        for g in self.grids:
            if index < g.n_tokens:
                return g.patch_box(index)
            index -= g.n_tokens
        raise IndexError(index)


@runtime_checkable
class Target(Protocol):
    """What every audit target has, a deployed model behind an endpoint included: it answers (image, prompt) pairs.
    That is all the rendered-text pathway, RUG and transfer need."""

    name: str
    level: str  # L1/L2/L3 (Level), or "API" for a deployed model whose fusion level is unknown

    @property
    def fingerprint(self) -> str:
        """Stable hash of what decides the answers (architecture and weights, or endpoint and served model); part
        of every store key."""
        ...

    def generate(
        self, images: torch.Tensor | list[torch.Tensor], prompts: list[str], max_new_tokens: int = 16
    ) -> list[str]:
        """Greedy answers, batched."""
        ...

    def settings(self) -> dict:
        """What else decides this target's answers and cost (kept in the run's model record)."""
        ...


@runtime_checkable
class VLM(Target, Protocol):
    """A white-box model: what the pixel attacks, OAR and layer recovery need beyond answers. Code that may meet
    either kind asks ``isinstance(model, VLM)``."""

    level: Level
    device: torch.device  # where inputs go; adapters never infer it from a parameter
    dtype: torch.dtype

    @property
    def decoder_layers(self) -> Sequence[nn.Module]: ...

    def score(self, images: torch.Tensor | list[torch.Tensor], prompts: list[str], answers: list[str]) -> AnswerScores:
        """Teacher-forced logits of ``answers``; differentiable w.r.t. ``images``."""
        ...

    def answer_tokens(self, answer: str) -> list[int]:
        """Token ids the model would emit for ``answer`` (end token included)."""
        ...

    def vision_features(self, images: torch.Tensor | list[torch.Tensor], stage: str = "encoder") -> torch.Tensor:
        """The vision encoder's own output (B, N, D), before any connector; differentiable (Vis-PGD).
        ``stage="connector"``: what the connector hands the language model instead."""
        ...

    def image_positions(self, images: torch.Tensor | list[torch.Tensor], prompts: list[str]) -> list[torch.Tensor]:
        """Per sample, sequence positions of the image tokens (for hidden-state patching)."""
        ...

    def patch_grid(self, image: torch.Tensor) -> PatchGrid: ...

    def attentions(
        self, images: torch.Tensor | list[torch.Tensor], prompts: list[str], layers: Sequence[int] | None = None
    ) -> list[torch.Tensor]:
        """Per sample, (n_text_after_image, n_image_tokens) attention averaged over heads and ``layers``."""
        ...

    def generate_patched(
        self,
        images: torch.Tensor | list[torch.Tensor],
        prompts: list[str],
        layer: int,
        values: list[torch.Tensor],
        max_new_tokens: int = 16,
        positions: list[torch.Tensor] | None = None,
    ) -> list[str]:
        """Greedy answers with the hidden states ``layer`` returns at ``positions`` (default: the
        image tokens) replaced by ``values`` (layer recovery)."""
        ...

    def hidden_states(self, images: torch.Tensor | list[torch.Tensor], prompts: list[str]) -> list[torch.Tensor]:
        """Per decoder layer, the hidden states (B, S, D) it returns on the prompt, read by hooks."""
        ...


# --------------------------------------------------------------------------- inputs


def to_image_tensor(image, sample_id: str | int | None = None) -> torch.Tensor:
    """One image (uint8 HxWx3 array, PIL image or float CHW tensor) as float CHW in [0, 1]."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None  # type: ignore[assignment]
    if Image is not None and isinstance(image, Image.Image):
        image = np.asarray(image.convert("RGB"))
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3:
            raise InputError(sample_id, "image", f"expected an (H, W, 3) array, got shape {image.shape}")
        if image.dtype != np.uint8:
            raise InputError(sample_id, "image", f"expected uint8 pixels, got {image.dtype}")
        return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 255.0
    if isinstance(image, torch.Tensor):
        if image.ndim != 3 or image.shape[0] != 3:
            raise InputError(sample_id, "image", f"expected a (3, H, W) tensor, got shape {tuple(image.shape)}")
        if not image.is_floating_point():
            raise InputError(sample_id, "image", f"expected a float tensor in [0, 1], got {image.dtype}")
        if image.numel() and (float(image.detach().min()) < 0.0 or float(image.detach().max()) > 1.0):
            raise InputError(sample_id, "image", "pixel values must lie in [0, 1]")
        return image
    raise InputError(sample_id, "image", f"not an image: {type(image).__name__}")


def pixels(images: Sequence[np.ndarray]) -> torch.Tensor | list[torch.Tensor]:
    """uint8 (H, W, 3) arrays as float pixels in [0, 1]: one (B, 3, H, W) batch when they share a size, else a
    list of (3, H, W) tensors (every adapter takes either)."""
    if len({im.shape for im in images}) <= 1:
        return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255
    return [to_image_tensor(im) for im in images]


def check_batch(images, prompts: list[str], ids: Sequence[str | int] | None = None) -> list[torch.Tensor]:
    """Validate a batch; errors name the sample (its id, else its index in the batch)."""
    ims = list(images) if isinstance(images, (list, tuple)) or images.ndim == 4 else None
    if ims is None:
        raise InputError(None, "images", f"expected a (B, 3, H, W) tensor or a list, got shape {tuple(images.shape)}")
    ids = list(ids) if ids is not None else list(range(len(ims)))
    if len(prompts) != len(ims):
        raise InputError(None, "prompts", f"{len(prompts)} prompts for {len(ims)} images")
    out = []
    for im, p, sid in zip(ims, prompts, ids):
        if not isinstance(p, str) or not p.strip():
            raise InputError(sid, "question", "is empty")
        out.append(to_image_tensor(im, sid))
    return out


# --------------------------------------------------------------------------- hooks
#
# "The hidden states at layer l" are those a decoder layer *returns* (its output, before
# anything the model adds after it, such as DeepStack's re-injected features). Layer
# recovery patches these: the embedding input is never replaced, so every layer up to
# and including l still reads the attacked image, and a patch undoes a flip only where
# the clean states really carry the answer. (Patching a layer's *input* at every prompt
# position would replay the clean run exactly at layer 0 and make recovery 100% by
# construction.)


def _layer_output(out) -> torch.Tensor:
    """A decoder layer's hidden states, whether it returns a tensor or a tuple (transformers' older layers)."""
    return out[0] if isinstance(out, (tuple, list)) else out


@contextmanager
def capture_hidden(layers: Sequence[nn.Module]) -> Iterator[list[torch.Tensor]]:
    """Record the hidden states each layer returns (first forward call per layer wins)."""
    store: list[torch.Tensor | None] = [None] * len(layers)

    def make(i):
        def hook(_m, _args, out):
            if store[i] is None:
                store[i] = _layer_output(out).detach()

        return hook

    handles = [layer.register_forward_hook(make(i)) for i, layer in enumerate(layers)]
    try:
        yield store  # type: ignore[misc]
    finally:
        for h in handles:
            h.remove()


@contextmanager
def replace_hidden(layer: nn.Module, positions: list[torch.Tensor], values: list[torch.Tensor]) -> Iterator[None]:
    """Overwrite the hidden states ``layer`` returns at ``positions[b]`` with ``values[b]`` for each sample b.

    Calls whose sequence does not reach the positions (cached decoding steps)
    pass through untouched: the prefix they would patch is already in the cache.
    """
    reach = int(max(int(p.max()) for p in positions if len(p))) if any(len(p) for p in positions) else -1

    def hook(_m, _args, out):
        h = _layer_output(out)
        if reach < 0 or h.shape[1] <= reach:
            return None
        h = h.clone()
        for b, (pos, val) in enumerate(zip(positions, values)):
            h[b, pos.to(h.device)] = val.to(h.device, h.dtype)
        if isinstance(out, (tuple, list)):
            return type(out)((h, *out[1:]))
        return h

    handle = layer.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
