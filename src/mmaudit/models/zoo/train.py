"""The zoo's training recipe: dense glyph pretraining of the encoder, then QA per level, then a scene focus.

Reproducible: every batch is drawn from ``(seed, phase, step)``, so a run stopped at any
checkpoint and resumed ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from mmaudit.data.synthetic import ALL_FAMILIES, generate
from mmaudit.models.zoo.arch import ZooConfig, ZooVLM
from mmaudit.models.zoo.tokenizer import ZooTokenizer

Q_LEN = 12  # prompt tokens incl. <sep>, left-padded
A_LEN = 9  # answer tokens incl. <eos>, right-padded
# Reading is sampled often early on purpose: copying glyphs to the output is the skill
# every other family builds on (a run with reading at 0.15 stayed at the priors longer).
FAMILY_WEIGHTS = {"charts": 0.3, "documents": 0.25, "scenes": 0.2, "reading": 0.25}
# Phase 2 (focus): scenes need relations the first phase leaves unlearnt (a colour bound to
# a shape in one cell, counting); a shorter run at a lower rate weights them up while the
# other families keep enough share not to be forgotten.
FOCUS_WEIGHTS = {"charts": 0.15, "documents": 0.15, "scenes": 0.55, "reading": 0.15}
# L2/L3 train these encoder stages jointly with the decoder; the high-resolution stem
# (stem, s1, s2) keeps its pretrained values at every level, which keeps CPU cost down.
JOINT_ENCODER_PARTS = ("s3.", "s4.", "row_mix.", "row_out.", "cls_head.", "style_head.", "owner_head.", "order_head.")


@dataclass
class Recipe:
    level: str = "L2"
    seed: int = 0
    n_per_family: int = 12_000
    distractor_banner: float = 0.15
    encoder_steps: int = 700
    steps: int = 2500
    batch: int = 64
    lr: float = 1.5e-3
    encoder_lr_scale: float = 0.3
    aux_weight: float = 0.1
    warmup: int = 200
    focus_steps: int = 1600
    focus_lr: float = 5e-4
    focus_warmup: int = 30
    checkpoint_every: int = 250
    threads: int = 2


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def encode_batch(
    tok: ZooTokenizer, questions: list[str], answers: list[str] | None = None, q_len: int = Q_LEN,
    a_len: int = A_LEN,
):
    """Token arrays in the zoo's text layout: [pad.. question <sep>][answer <eos> pad..]."""
    q = np.zeros((len(questions), q_len), dtype=np.int64)
    for i, text in enumerate(questions):
        ids = tok.encode(text)[: q_len - 1] + [tok.sep]
        q[i, q_len - len(ids) :] = ids
    if answers is None:
        return q, None
    a = np.zeros((len(answers), a_len), dtype=np.int64)
    for i, text in enumerate(answers):
        ids = tok.encode(text)[: a_len - 1] + [tok.eos]
        a[i, : len(ids)] = ids
    return q, a


class Arrays:
    """A training set held as arrays (images, dense labels, tokens), cached on disk."""

    def __init__(self, n_per_family: int, seed: int, distractor: float, cache: Path | None) -> None:
        key = hashlib.sha1(f"v2-{n_per_family}-{seed}-{distractor}".encode()).hexdigest()[:12]
        path = cache / f"train-{key}.npz" if cache else None
        if path and path.exists():
            z = np.load(path)
            self.__dict__.update({k: z[k] for k in z.files})
            return
        tok = ZooTokenizer()
        samples = list(generate(ALL_FAMILIES, n_per_family, seed=seed, distractor_banner=distractor))
        self.images = np.stack([s.image for s in samples])
        self.cell_class = np.stack([s.layout.cell_class.reshape(-1) for s in samples])
        self.cell_style = np.stack([s.layout.cell_style.reshape(-1) for s in samples])
        self.cell_owner = np.stack([s.layout.cell_owner.reshape(-1) for s in samples])
        self.cell_order = np.stack([s.layout.cell_order.reshape(-1) for s in samples])
        self.q, self.a = encode_batch(tok, [s.question for s in samples], [s.answer for s in samples])
        self.task_family = np.array([ALL_FAMILIES.index(s.task_family) for s in samples])
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, **{k: v for k, v in self.__dict__.items()})

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        return {
            "images": torch.from_numpy(self.images[idx]).permute(0, 3, 1, 2).float() / 255.0,
            "cell_class": torch.from_numpy(self.cell_class[idx]),
            "cell_style": torch.from_numpy(self.cell_style[idx]),
            "cell_owner": torch.from_numpy(self.cell_owner[idx]),
            "cell_order": torch.from_numpy(self.cell_order[idx]),
            "q": torch.from_numpy(self.q[idx]),
            "a": torch.from_numpy(self.a[idx]),
        }

    def sample_indices(self, rng: np.random.Generator, n: int, weights: dict[str, float]) -> np.ndarray:
        w = np.array([weights[ALL_FAMILIES[f]] for f in self.task_family])
        return rng.choice(len(self.task_family), size=n, p=w / w.sum())


def dense_loss(enc: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(
        F.cross_entropy(enc[f"{key}_logits"].flatten(0, 1), batch[f"cell_{key}"].flatten())
        for key in ("class", "style", "owner", "order")
    )


def qa_loss(model: ZooVLM, batch: dict[str, torch.Tensor], enc: dict | None = None) -> torch.Tensor:
    q, a = batch["q"], batch["a"]
    text = torch.cat([q, a[:, :-1]], 1)
    logits = model(batch["images"], text, text != 0, enc=enc)
    start = model.n_visual + q.shape[1] - 1
    pred = logits[:, start : start + a.shape[1]]
    return F.cross_entropy(pred.flatten(0, 1), a.flatten(), ignore_index=0)


def new_model(level: str) -> ZooVLM:
    tok = ZooTokenizer()
    cfg = ZooConfig(
        level=level, vocab_size=len(tok), class_tokens=tok.class_token_map(), owner_tokens=tok.owner_token_map()
    )
    return ZooVLM(cfg)


def _lr_at(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _save_ckpt(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # atomic: a kill never leaves a half-written checkpoint


def pretrain_encoder(recipe: Recipe, data: Arrays, workdir: Path, log=print) -> dict[str, torch.Tensor]:
    """Dense per-cell glyph/shape/style classification; shared by every level."""
    out = workdir / f"encoder-seed{recipe.seed}.safetensors"
    if out.exists():
        return load_file(out)
    torch.manual_seed(recipe.seed)
    model = new_model("L1")
    enc = model.encoder
    opt = torch.optim.AdamW(enc.parameters(), lr=2e-3, weight_decay=0.01)
    t0 = time.time()
    for step in range(recipe.encoder_steps):
        for g in opt.param_groups:
            g["lr"] = 2e-3 * _lr_at(step, recipe.encoder_steps, 100)
        batch = data.batch(data.sample_indices(_rng(recipe.seed, 1, step), recipe.batch, FAMILY_WEIGHTS))
        loss = dense_loss(enc(batch["images"]), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0 or step == recipe.encoder_steps - 1:
            log(f"encoder step {step} loss {loss.item():.4f} ({time.time() - t0:.0f}s)")
    state = {k: v.contiguous() for k, v in enc.state_dict().items()}
    save_file(state, out)
    return state


def _optimizer(model: ZooVLM, recipe: Recipe) -> torch.optim.Optimizer:
    """AdamW over what the level trains: L1 keeps the encoder frozen, L2/L3 train its upper stages."""
    frozen = recipe.level == "L1"
    enc_params = []
    for name, p in model.encoder.named_parameters():
        joint = not frozen and name.startswith(JOINT_ENCODER_PARTS)
        p.requires_grad_(joint)
        if joint:
            enc_params.append(p)
    other = [p for n, p in model.named_parameters() if not n.startswith("encoder.")]
    groups = [{"params": other, "scale": 1.0}]
    if not frozen:
        groups.append({"params": enc_params, "scale": recipe.encoder_lr_scale})
    return torch.optim.AdamW(groups, lr=recipe.lr, weight_decay=0.01)


def _schedule(recipe: Recipe, step: int) -> tuple[float, dict[str, float], int]:
    """(learning rate, family weights, batch-stream key) at a global step of the two phases."""
    if step < recipe.steps:
        return recipe.lr * _lr_at(step, recipe.steps, recipe.warmup), FAMILY_WEIGHTS, 2
    k = step - recipe.steps
    return recipe.focus_lr * _lr_at(k, recipe.focus_steps, recipe.focus_warmup), FOCUS_WEIGHTS, 3


def train_level(recipe: Recipe, workdir: Path, log=print, eval_fn=None, stop_at: int | None = None) -> ZooVLM:
    """Train one level (QA phase, then the focus phase); resumes from ``workdir`` if a checkpoint is there.

    The focus phase starts a fresh optimizer, so its result depends only on the weights the
    first phase ends with. ``stop_at`` ends the loop early as a kill would (tests use it).
    """
    torch.set_num_threads(recipe.threads)
    workdir.mkdir(parents=True, exist_ok=True)
    data = Arrays(recipe.n_per_family, recipe.seed, recipe.distractor_banner, workdir)
    enc_state = pretrain_encoder(recipe, data, workdir, log)
    torch.manual_seed(recipe.seed)
    model = new_model(recipe.level)
    model.encoder.load_state_dict(enc_state)
    frozen = recipe.level == "L1"
    opt = _optimizer(model, recipe)
    ckpt = workdir / f"{recipe.level}-seed{recipe.seed}.ckpt"
    total = recipe.steps + recipe.focus_steps
    step, elapsed = 0, 0.0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, elapsed = state["step"], state["elapsed"]
        log(f"resumed {recipe.level} at step {step}")
    t0 = time.time() - elapsed
    model.train()
    if frozen:
        model.encoder.eval()
    while step < (stop_at if stop_at is not None else total):
        if step == recipe.steps:
            opt = _optimizer(model, recipe)
            log(f"{recipe.level} focus phase from step {step}")
        lr, weights, key = _schedule(recipe, step)
        for g in opt.param_groups:
            g["lr"] = lr * g["scale"]
        batch = data.batch(data.sample_indices(_rng(recipe.seed, key, step), recipe.batch, weights))
        enc = model.encoder(batch["images"])
        loss = qa_loss(model, batch, enc)
        if not frozen and recipe.aux_weight:
            loss = loss + recipe.aux_weight * dense_loss(enc, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            log(f"{recipe.level} step {step} loss {loss.item():.4f} ({time.time() - t0:.0f}s)")
        if step % recipe.checkpoint_every == 0 or step in (recipe.steps, total):
            _save_ckpt(ckpt, {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                              "elapsed": time.time() - t0})
            if eval_fn is not None:
                model.eval()
                log(f"{recipe.level} step {step} eval {json.dumps(eval_fn(model))}")
                model.train()
                if frozen:
                    model.encoder.eval()
    model.eval()
    model.train_seconds = time.time() - t0  # type: ignore[attr-defined]
    return model
