"""Image encoders a transfer attack optimises against (surrogates): one embedding per image, differentiable.

Any tower the tool can load serves: a white-box model's own vision tower (the zoo's levels, any Hugging Face VLM
spec: its encoder features, mean-pooled), or a stand-alone CLIP or SigLIP vision model (a hub id or folder such
as ``openai/clip-vit-base-patch16``; CLIP's projected ``image_embeds``, SigLIP's pooled output), its input
resized and normalised as its processor does. ``features`` gives the tokens before pooling (a tower's encoder
output, a CLIP / SigLIP model's last hidden state): what a token-level objective compares.
An :class:`Ensemble` is what the attack holds: its members' fingerprints key the crafted images.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mmaudit.errors import UsageError
from mmaudit.models.vlm import VLM

STANDALONE = ("clip", "clip_vision_model", "siglip", "siglip_vision_model")
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


class TowerEncoder:
    """A white-box VLM's vision encoder, mean-pooled over its tokens; ``size``: the side every input is resized
    to first (the zoo reads a fixed grid), else the adapter's own preprocessing resizes."""

    def __init__(self, vlm: VLM, size: tuple[int, int] | None = None) -> None:
        self.vlm, self.size = vlm, size
        self.name, self.fingerprint, self.device = f"{vlm.name} tower", vlm.fingerprint, torch.device(vlm.device)

    def features(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """(N, T, D) token features, padded at the end to the batch's longest image."""
        ims = [resize(im, self.size) for im in images] if self.size else list(images)
        return self.vlm.vision_features(torch.stack(ims) if self.size else ims).float()

    def embed(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.features(images).mean(1)


class StandaloneEncoder:
    """A CLIP or SigLIP vision model: resized (bicubic, antialiased) to its image size, normalised, embedded."""

    def __init__(self, model, mean: Sequence[float], std: Sequence[float], name: str, device) -> None:
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        size = int(model.config.image_size)
        self.size, self.name, self.device = (size, size), name, torch.device(device)
        self.mean = torch.tensor(mean, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(std, device=self.device).view(1, 3, 1, 1)
        h = hashlib.sha256(json.dumps(model.config.to_dict(), sort_keys=True, default=str).encode())
        h.update(name.encode())
        self.fingerprint = h.hexdigest()[:16]

    def _forward(self, images: Sequence[torch.Tensor]):
        x = torch.stack([resize(im.to(self.device), self.size) for im in images])
        return self.model(pixel_values=((x - self.mean) / self.std).to(self.model.dtype))

    def features(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """(N, T, D): the last layer's token states (class token and patches)."""
        return self._forward(images).last_hidden_state.float()

    def embed(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self._forward(images)
        emb = getattr(out, "image_embeds", None)
        return (emb if emb is not None else out.pooler_output).float()


def resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(3, H, W) in [0, 1] to ``size``, differentiably (bicubic with antialiasing when shrinking), kept in range."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    return F.interpolate(image[None], size=size, mode="bicubic", align_corners=False, antialias=True)[0].clamp(0, 1)


@dataclass(frozen=True)
class Ensemble:
    """The surrogates a transfer attack averages over; ``params()`` keys what it crafts."""

    members: tuple

    @property
    def name(self) -> str:
        return "ensemble(" + " + ".join(m.name.removesuffix(" tower") for m in self.members) + ")"

    @property
    def fingerprints(self) -> list[str]:
        return [m.fingerprint for m in self.members]

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256("|".join(self.fingerprints).encode()).hexdigest()[:16]

    def params(self) -> dict:
        return {"surrogates": self.fingerprints}


def tower(vlm: VLM) -> TowerEncoder:
    """A loaded white-box model's vision tower as a surrogate (the zoo's at its fixed input size)."""
    from mmaudit.models.zoo.adapter import ZooAdapter

    if isinstance(vlm, ZooAdapter):
        from mmaudit.data.render import SIZE

        return TowerEncoder(vlm, (SIZE, SIZE))
    return TowerEncoder(vlm)


def load_encoder(spec: str, placement=None):
    """A surrogate by spec: 'zoo:L2' or any white-box model spec (its vision tower), or a CLIP / SigLIP vision
    model (hub id or folder)."""
    from mmaudit.models.load import Placement, load_model

    if spec.startswith("endpoint:"):
        raise UsageError(f"--surrogates {spec}: a surrogate needs gradients; an endpoint gives none")
    placement = placement or Placement()
    path = spec.rpartition("@")[0] if "@" in spec else spec
    model_type = None if spec.startswith("zoo:") else _model_type(path)
    if model_type in STANDALONE:
        return _standalone(path, model_type, placement)
    return tower(load_model(spec, placement))


def _model_type(path: str) -> str | None:
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path).model_type
    except Exception:  # noqa: BLE001 - not a transformers checkpoint: load_model says why
        return None


def _standalone(path: str, model_type: str, placement) -> StandaloneEncoder:
    from transformers import AutoImageProcessor, CLIPVisionModelWithProjection, SiglipVisionModel

    device = placement.resolved_device()
    cls = CLIPVisionModelWithProjection if model_type.startswith("clip") else SiglipVisionModel
    model = cls.from_pretrained(path).to(device)
    try:
        ip = AutoImageProcessor.from_pretrained(path)
        mean, std = ip.image_mean, ip.image_std
    except (OSError, ValueError):  # a bare vision model folder: the family's published normalisation
        mean, std = (CLIP_MEAN, CLIP_STD) if model_type.startswith("clip") else ((0.5,) * 3, (0.5,) * 3)
    return StandaloneEncoder(model, mean, std, str(path), device)
