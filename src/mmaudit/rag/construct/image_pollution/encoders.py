"""Image encoders the optimisation-based operators use, behind two small interfaces.

``ConceptEncoder`` (adversarial patch): image features and the feature of a
concept. open_clip when the user has weights (text concepts through CLIP's text
tower); offline, the zoo's glyph encoder, whose "concept" is the concept's name
rendered on the synthetic grid (the zoo reads text, so a word is what it can
represent).

``StyleFeatures`` (style transfer): a stack of feature maps for Gram matrices.
VGG-19 when the user supplies its weights (torchvision's layout of
``features.N.weight``; loaded without torchvision); otherwise a fixed
random-feature network (seeded), documented as such: random convolutional
features carry texture statistics well enough for Gram-matrix style transfer,
but it is not VGG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class ConceptEncoder(Protocol):
    name: str

    def images(self, x: torch.Tensor) -> torch.Tensor: ...  # (B, 3, H, W) in [0, 1] -> (B, D)

    def concept(self, text: str) -> torch.Tensor: ...  # -> (D,)


class ZooConceptEncoder:
    """The zoo L1 glyph encoder (frozen), mean-pooled over its cells."""

    name = "zoo-L1-encoder"

    def __init__(self) -> None:
        from mmaudit.models.zoo.adapter import load_zoo

        self.vlm = load_zoo("L1")

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return self.vlm.vision_features(x).mean(1)

    def concept(self, text: str) -> torch.Tensor:
        from mmaudit.data.render import CHARS, GRID, Canvas

        word = "".join(c for c in text.upper() if c in CHARS)[:GRID] or "X"
        c = Canvas((255, 255, 255))
        for row in (2, 4):
            c.text(row, 0, word, (0, 0, 0), role="label")
        image, _ = c.finish()
        x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255
        return self.images(x)[0].detach()


class OpenClipEncoder:  # pragma: no cover - needs open_clip and its weights
    def __init__(self, model: str = "ViT-B-32", pretrained: str = "openai", device: str = "cpu") -> None:
        import open_clip

        self.model, _, _ = open_clip.create_model_and_transforms(model, pretrained=pretrained, device=device)
        self.tok = open_clip.get_tokenizer(model)
        self.name = f"open_clip:{model}:{pretrained}"
        self.device = device
        self.size = self.model.visual.image_size
        self.size = self.size if isinstance(self.size, int) else self.size[0]
        self.mean = torch.tensor((0.48145466, 0.4578275, 0.40821073), device=device).view(1, 3, 1, 1)
        self.std = torch.tensor((0.26862954, 0.26130258, 0.27577711), device=device).view(1, 3, 1, 1)

    def images(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x.to(self.device), size=(self.size, self.size), mode="bilinear", align_corners=False)
        return self.model.encode_image((x - self.mean) / self.std)

    def concept(self, text: str) -> torch.Tensor:
        with torch.no_grad():
            return self.model.encode_text(self.tok([f"a photo of {text}"]).to(self.device))[0]


VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class StyleFeatures(nn.Module):
    """Feature maps at the style layers (and the content layer last)."""

    def __init__(self, channels: list, taps: list[int], content_tap: int, mean=(0.0, 0.0, 0.0),
                 std=(1.0, 1.0, 1.0), name: str = "") -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c in channels:
            if c == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU()]
                c_in = c
        self.features = nn.Sequential(*layers)
        self.taps, self.content_tap, self.name = taps, content_tap, name
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1))
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        h = (x - self.mean) / self.std
        style, content = [], None
        for i, layer in enumerate(self.features):
            h = layer(h)
            if i in self.taps:
                style.append(h)
            if i == self.content_tap:
                content = h
            if i >= max(max(self.taps), self.content_tap):
                break
        return style, content


def vgg19(weights: str | Path) -> StyleFeatures:
    """VGG-19 (Gatys et al.: relu1_1 .. relu5_1 for style, relu4_2 for content) from torchvision-layout weights."""
    net = StyleFeatures(VGG19, taps=[1, 6, 11, 20, 29], content_tap=22, mean=(0.485, 0.456, 0.406),
                        std=(0.229, 0.224, 0.225), name="vgg19")
    state = torch.load(weights, map_location="cpu", weights_only=True)
    net.load_state_dict({k: v for k, v in state.items() if k.startswith("features.")}, strict=False)
    return net.eval()


def random_features(seed: int = 0) -> StyleFeatures:
    """A fixed random-weight conv stack (seeded; He init), the offline stand-in for VGG-19."""
    g = torch.Generator().manual_seed(seed)
    net = StyleFeatures([32, 32, "M", 64, 64, "M", 96], taps=[1, 6, 11], content_tap=8, name=f"random-features-{seed}")
    for m in net.features:
        if isinstance(m, nn.Conv2d):
            m.weight.data = torch.randn(m.weight.shape, generator=g) * (2 / (m.in_channels * 9)) ** 0.5
            m.bias.data.zero_()
    return net.eval()
