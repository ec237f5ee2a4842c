"""The zoo models behind the VLM protocol, and loading them from the shipped weights."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from mmaudit.data.render import SIZE
from mmaudit.errors import UsageError
from mmaudit.models.levels import LEVELS
from mmaudit.models.vlm import AnswerScores, PatchGrid, capture_hidden, check_batch, replace_hidden
from mmaudit.models.zoo.arch import ZooConfig, ZooVLM
from mmaudit.models.zoo.tokenizer import ZooTokenizer
from mmaudit.models.zoo.train import Q_LEN, encode_batch

WEIGHTS = resources.files("mmaudit.models.zoo") / "weights"


class ZooAdapter:
    """A trained zoo model seen through the VLM protocol."""

    def __init__(
        self, model: ZooVLM, name: str | None = None, device: str | torch.device = "cpu", freeze: bool = True
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device)
        if freeze:  # attacks need pixel gradients only
            self.model.eval()
            for p in self.model.parameters():
                p.requires_grad_(False)
        self.dtype = torch.float32  # the zoo's tiny models always run in float32
        self.level = model.cfg.level
        self.name = name or f"zoo-{self.level}"
        self.tok = ZooTokenizer()
        self._fingerprint: str | None = None

    # ---------------------------------------------------------------- plumbing
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(json.dumps(self.model.cfg.to_dict(), sort_keys=True).encode())
            for k, v in sorted(self.model.state_dict().items()):
                h.update(k.encode())
                h.update(v.detach().cpu().contiguous().numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def settings(self) -> dict:
        return {}

    @property
    def decoder_layers(self) -> Sequence[nn.Module]:
        return list(self.model.layers)

    def _images(self, images, prompts: list[str]) -> torch.Tensor:
        ims = check_batch(images, prompts)
        out = []
        for im in ims:
            im = im.to(self.device)
            if im.shape[-2:] != (SIZE, SIZE):  # differentiable resize, inside the model
                im = F.interpolate(im[None], size=(SIZE, SIZE), mode="bilinear", align_corners=False)[0]
            out.append(im)
        return torch.stack(out)

    def _prompts(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids, their mask, and each row's position shift: the model's text positions are
        absolute slots, so a row is placed where it would sit padded to its own length (a long prompt in a
        batch must not move every other prompt off its trained positions)."""
        cap = self.model.cfg.max_text - 10
        own = [min(cap, max(Q_LEN, len(self.tok.encode(p)) + 1)) for p in prompts]
        q, _ = encode_batch(self.tok, prompts, q_len=max(own))
        q = torch.from_numpy(q).to(self.device)
        shift = torch.tensor([max(own) - n for n in own], device=self.device)
        return q, q != self.tok.pad, shift

    # ---------------------------------------------------------------- protocol
    def generate(self, images, prompts: list[str], max_new_tokens: int = 9) -> list[str]:
        x = self._images(images, prompts)
        q, valid, shift = self._prompts(prompts)
        with torch.no_grad():
            ids = self.model.generate_ids(x, q, valid, max_new_tokens, self.tok.eos, shift=shift)
        return [self.tok.decode(row.tolist()) for row in ids]

    def answer_tokens(self, answer: str) -> list[int]:
        return self.tok.encode(answer) + [self.tok.eos]

    def score(self, images, prompts: list[str], answers: list[str]) -> AnswerScores:
        x = self._images(images, prompts)
        q, _, shift = self._prompts(prompts)
        a_len = max(len(self.answer_tokens(a)) for a in answers)
        _, a = encode_batch(self.tok, prompts, answers, q_len=q.shape[1], a_len=a_len)
        a = torch.from_numpy(a).to(self.device)
        text = torch.cat([q, a[:, :-1]], 1)
        logits = self.model(x, text, text != self.tok.pad, shift=shift)
        start = self.model.n_visual + q.shape[1] - 1
        return AnswerScores(logits[:, start : start + a_len], a, a != self.tok.pad)

    def vision_features(self, images, stage: str = "encoder") -> torch.Tensor:
        x = self._images(images, ["-"] * len(images))
        enc = self.model.encoder(x)
        if stage == "connector":
            return self.model.visual_tokens(enc)
        if stage != "encoder":
            raise ValueError(f"stage must be 'encoder' or 'connector', got {stage!r}")
        return enc["features"]

    def image_positions(self, images, prompts: list[str]) -> list[torch.Tensor]:
        return [torch.arange(self.model.n_visual) for _ in prompts]

    def patch_grid(self, image: torch.Tensor) -> PatchGrid:
        g = self.model.cfg.grid
        return PatchGrid(g, g, int(image.shape[-2]), int(image.shape[-1]))

    def hidden_states(self, images, prompts: list[str]) -> list[torch.Tensor]:
        x = self._images(images, prompts)
        q, valid, shift = self._prompts(prompts)
        with capture_hidden(self.model.layers) as store, torch.no_grad():
            self.model(x, q, valid, shift=shift)
        return list(store)

    def generate_patched(self, images, prompts: list[str], layer: int, values, max_new_tokens: int = 9,
                         positions: list[torch.Tensor] | None = None) -> list[str]:
        positions = positions if positions is not None else self.image_positions(images, prompts)
        with replace_hidden(self.model.layers[layer], positions, values):
            return self.generate(images, prompts, max_new_tokens)

    def attentions(self, images, prompts: list[str], layers: Sequence[int] | None = None) -> list[torch.Tensor]:
        n = len(self.model.layers)
        layers = list(layers) if layers is not None else list(range(n // 2, n))
        x = self._images(images, prompts)
        q, valid, shift = self._prompts(prompts)
        for i in layers:
            self.model.layers[i].keep_attention = True
        try:
            with torch.no_grad():
                self.model(x, q, valid, shift=shift)
            att = torch.stack([self.model.layers[i].attention for i in layers]).mean(0).mean(1)  # (B, S, S)
        finally:
            for i in layers:
                self.model.layers[i].keep_attention = False
                self.model.layers[i].attention = None
        nv = self.model.n_visual
        return [att[b, nv:][valid[b]][:, :nv] for b in range(len(prompts))]


# -------------------------------------------------------------------- weights


def save_zoo(model: ZooVLM, directory: Path, card: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    level = model.cfg.level
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, directory / f"{level}.safetensors")
    card = {"config": model.cfg.to_dict(), **card}
    (directory / f"{level}.json").write_text(json.dumps(card, indent=2))
    return directory / f"{level}.safetensors"


def weights_dir(override: Path | None = None) -> Path:
    """The shipped weights, unless ``override`` or $MMAUDIT_ZOO_WEIGHTS names another folder."""
    env = os.environ.get("MMAUDIT_ZOO_WEIGHTS")
    return Path(override) if override else Path(env) if env else Path(str(WEIGHTS))


def model_card(level: str, weights: Path | None = None) -> dict:
    base = weights_dir(weights)
    return json.loads((base / f"{level}.json").read_text())


def load_zoo(level: str = "L2", device: str | torch.device = "cpu", weights: Path | None = None) -> ZooAdapter:
    """Build a shipped zoo model offline from its safetensors and model card."""
    if level not in LEVELS:
        raise UsageError(f"unknown zoo level {level!r}; choose from {', '.join(LEVELS)}")
    base = weights_dir(weights)
    path = base / f"{level}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"no weights for zoo level {level} at {path}; run `mmaudit zoo train --level {level}`")
    cfg = ZooConfig.from_dict(model_card(level, base)["config"])
    model = ZooVLM(cfg)
    model.load_state_dict(load_file(path))
    return ZooAdapter(model, device=device)
