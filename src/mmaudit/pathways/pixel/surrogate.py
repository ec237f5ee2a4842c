"""Surrogate-ensemble transfer: images made to transfer, with no gradient (and no query) of the target.

After M-Attack (2025) and FOA-Attack: every step takes a random local crop of the adversarial image (a fraction
``crop_scale`` of its area, aspect ratio in [3/4, 4/3], placed at random, as RandomResizedCrop draws it),
embeds it with each surrogate image encoder, and takes a signed step of ``alpha`` inside the eps-ball on the
ensemble's mean score. What is scored (``loss``):

* ``match`` (M-Attack's): cosine similarity to the embedding of a target image, the question's Typo-Evid image
  (the plan's task-matching wrong answer rendered on the clean image; ``target`` may name another rendered-text
  attack, such as Nat-Evid), so the perturbation carries the rendered-text pathway into pixel space within eps;
* ``away``: minus the cosine similarity to the clean image's embedding (the ensemble form of Vis-PGD, untargeted);
* ``contrast``: both, the target's similarity minus the clean image's (toward the rendered text, away from what
  the image showed).

``features="pooled"`` compares one embedding per image (CLIP's projected embedding, a tower's mean token), as
M-Attack does; ``"tokens"`` compares the encoder's token features flattened, position by position, and then each
crop is resized back to the image's own size so its tokens line up with the reference's. Crops are drawn from
each sample's own seeded generator, so a sample's image never depends on its batch-mates.

The defaults (``away``, ``tokens``, whole images) are what transferred on the zoo; M-Attack's recipe
(``match``, ``pooled``, crops of 0.5-0.9) transferred least there (docs/audit.md has both, measured).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mmaudit.models.encoders import Ensemble, resize
from mmaudit.models.transforms import Pipeline
from mmaudit.models.vlm import to_image_tensor
from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack
from mmaudit.pathways.text.base import TextAttack
from mmaudit.pathways.text.typo_evid import TypoEvid

LOSSES = ("match", "away", "contrast")
FEATURES = ("pooled", "tokens")


def random_crop(image: torch.Tensor, scale: tuple[float, float], g: torch.Generator) -> torch.Tensor:
    """A RandomResizedCrop-style box of ``image`` (3, H, W): area fraction in ``scale``, log-uniform aspect ratio
    in [3/4, 4/3], uniform position (the full image when no box fits in ten draws)."""
    h, w = image.shape[-2:]
    for _ in range(10):
        area = h * w * (scale[0] + (scale[1] - scale[0]) * float(torch.rand(1, generator=g)))
        ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * float(torch.rand(1, generator=g)))
        cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (1,), generator=g))
            left = int(torch.randint(0, w - cw + 1, (1,), generator=g))
            return image[:, top : top + ch, left : left + cw]
    return image


@attack("surrogate", display="Surrogate ensemble", pathway="pixel", role="baseline", transfer_only=True,
        table_position=5, uses_wrong=lambda params: params.get("loss") != "away")
@dataclass
class SurrogateEnsemble(PixelAttack):
    eps: float = 16 / 255
    steps: int = 300
    alpha: float | None = 1 / 255
    random_start: bool = False
    early_stop: bool = False  # a transfer attack never asks its target
    crop_scale: tuple[float, float] = (1.0, 1.0)
    ensemble: Ensemble = field(default_factory=lambda: Ensemble(()), metadata={"key": "nested"})
    # the edit whose image each question's perturbation is matched to (the paper's Typo-Evid by default); not
    # part of the key when the loss reads no target
    target: TextAttack = field(default_factory=TypoEvid, metadata={"key": "nested"})
    loss: str = "away"
    features: str = "tokens"
    # crafted through the targets' delivery pipeline: the encoders see its real output, the gradient flows through
    # its stand-ins (as an adaptive white-box attack does); the clean and target references pass through it too
    channel: str | None = field(default=None, metadata={"key": "omit_default"})
    defence: str | None = field(default=None, metadata={"key": "omit_default"})

    STRONG = ()  # crafted, never asked: no ensemble of objectives (its own ``ensemble`` is of surrogate encoders)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in LOSSES:
            raise ValueError(f"surrogate loss must be one of {LOSSES}, got {self.loss!r}")
        if self.features not in FEATURES:
            raise ValueError(f"surrogate features must be one of {FEATURES}, got {self.features!r}")
        if self.odi:
            raise ValueError("odi diversifies a target model's outputs; a transfer attack never asks its target")
        _ = self.pipeline  # a bad --channel/--defence is named before any crafting

    def params(self) -> dict:
        p = super().params()
        if self.loss == "away":
            p.pop("target")
        return p

    def encode(self, encoder, images: list[torch.Tensor]) -> torch.Tensor:
        """One row per image: its unit embedding, or its flattened tokens (padded at the end)."""
        if self.features == "pooled":
            return F.normalize(encoder.embed(images), dim=-1)
        return encoder.features(images).flatten(1)

    @property
    def pipeline(self) -> Pipeline | None:
        return Pipeline.of(self.channel, self.defence)

    def delivered(self, x: torch.Tensor, g: torch.Generator, adaptive: bool = True) -> torch.Tensor:
        """The image as the targets receive it (itself without a pipeline)."""
        pipe = self.pipeline
        if pipe is None:
            return x
        return pipe.adaptive(x, g) if adaptive else pipe.real(x, g)

    def prepare(self, vlm, x, samples):
        """Per surrogate, each question's reference embeddings (its target image's and/or its clean image's,
        one image at a time: token counts follow each image's size), and its crop generator."""
        if not self.ensemble.members:
            raise ValueError("a surrogate-ensemble attack needs at least one surrogate encoder")
        refs = {}
        if self.loss != "away":
            refs["target"] = [resize(to_image_tensor(self.target(s).image, s.id), tuple(xi.shape[-2:]))
                              for s, xi in zip(samples, x)]
        if self.loss != "match":
            refs["clean"] = list(x)
        ctx = {"rng": [torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:crop:{s.id}".encode()))
                       for s in samples]}
        refs = {name: [self.delivered(im, torch.Generator().manual_seed(0), adaptive=False) for im in images]
                for name, images in refs.items()}
        with torch.no_grad():
            for k, enc in enumerate(self.ensemble.members):
                for name, images in refs.items():
                    ctx[f"{name}{k}"] = [self.encode(enc, [im.to(enc.device)])[0].cpu() for im in images]
        return ctx

    def view(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """What the encoders see this step: a random local crop (resized back to the image's size for tokens)."""
        if self.crop_scale == (1.0, 1.0):
            return x
        crop = random_crop(x, self.crop_scale, g)
        return resize(crop, tuple(x.shape[-2:])) if self.features == "tokens" else crop

    def objective(self, vlm, x_adv, samples, ctx):
        views = [self.view(self.delivered(x, g), g) for x, g in zip(x_adv, ctx["rng"])]
        scores = []
        for k, enc in enumerate(self.ensemble.members):
            emb = self.encode(enc, [v.to(enc.device) for v in views])

            def cos(refs: list[torch.Tensor], emb: torch.Tensor = emb) -> torch.Tensor:
                return torch.stack([F.cosine_similarity(e[: r.numel()], r.to(e.device), dim=0)
                                    for e, r in zip(emb, refs)])

            score = cos(ctx[f"target{k}"]) if self.loss != "away" else 0
            if self.loss != "match":
                score = score - cos(ctx[f"clean{k}"])
            scores.append(score.cpu())
        return torch.stack(scores).mean(0), None
