"""`mmaudit audit`: clean pass, pixel attacks over each model's clean-correct set, into the store.

Units of work are fixed chunks of a model's clean-correct set (sorted by sample
id), so a resumed run forms exactly the batches an uninterrupted one did and
ends with identical numbers. Each chunk's records are written together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM, pixels
from mmaudit.pathways.pixel import ATTACKS
from mmaudit.store import RunStore, key_of


@dataclass
class AuditConfig:
    attacks: list[str] = field(default_factory=lambda: list(ATTACKS))
    eps: float = 8 / 255
    steps: int = 40
    alpha: float | None = None
    seed: int = 0
    batch: int = 32
    early_stop: bool = True
    downscale: int | None = None
    verify_reload: bool = True


MAX_NEW_TOKENS = 16  # the clean pass and every attack's check decode the same length


def make_attack(name: str, cfg: AuditConfig, judge: Judge | None = None):
    return ATTACKS[name](eps=cfg.eps, steps=cfg.steps, alpha=cfg.alpha, seed=cfg.seed, early_stop=cfg.early_stop,
                         downscale=cfg.downscale, max_new_tokens=MAX_NEW_TOKENS, judge=judge or Judge())


def sample_fingerprint(s: Sample) -> str:
    h = hashlib.sha256(s.image.tobytes())
    h.update(f"{s.image.shape}|{s.question}|{s.answer}|{s.answer_type}|{s.family}".encode())
    return h.hexdigest()[:16]


def record_errors(store: RunStore, errors: list[InputError]) -> None:
    store.put_many(
        {"kind": "error", "key": key_of(kind="error", sample=str(e.sample_id), field=e.field, reason=e.reason),
         "sample": str(e.sample_id), "field": e.field, "reason": e.reason}
        for e in errors
    )


def clean_pass(vlm: VLM, samples: list[Sample], store: RunStore, judge: Judge, batch: int) -> list[Sample]:
    """Answer every sample on its clean image; return the clean-correct set C, sorted by id."""
    samples = sorted(samples, key=lambda s: s.id)
    keys = {s.id: key_of(kind="clean", model=vlm.fingerprint, sample=sample_fingerprint(s)) for s in samples}
    for i in range(0, len(samples), batch):  # fixed chunks: a resumed run batches exactly as a fresh one
        chunk = samples[i : i + batch]
        if all(keys[s.id] in store for s in chunk):
            continue
        answers = vlm.generate(pixels([s.image for s in chunk]), [s.question for s in chunk], MAX_NEW_TOKENS)
        store.put_many(
            {"kind": "clean", "key": keys[s.id], "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint,
             "sample": s.id, "family": s.family, "answer_type": s.answer_type, "reference": s.answer,
             "question": s.question, "answer": a, "correct": bool(judge(a, s.answer, s.family, s.answer_type))}
            for s, a in zip(chunk, answers)
        )
    return sorted((s for s in samples if store.get(keys[s.id])["correct"]), key=lambda s: s.id)


def attack_chunk(vlm: VLM, attack, chunk: list[Sample], keys: list[str], out: Path, judge: Judge,
                 verify: bool) -> list[dict]:
    res = attack(vlm, chunk)
    adv_dir = out / "adv" / attack.name
    adv_dir.mkdir(parents=True, exist_ok=True)
    reloaded = []
    paths = []
    for s, adv, key in zip(chunk, res.adv_uint8, keys):
        path = adv_dir / f"{key}.png"
        Image.fromarray(adv).save(path)
        with Image.open(path) as im:
            back = np.asarray(im.convert("RGB"))
        if not np.array_equal(back, adv):
            raise RuntimeError(f"sample {s.id!r}: saved adversarial image does not round-trip")
        reloaded.append(back)
        paths.append(str(path.relative_to(out)))
    verified = list(res.flipped)
    flips = [i for i, f in enumerate(res.flipped) if f]
    if verify and flips:  # a flip counts only if the reloaded PNG still flips
        again = vlm.generate(
            pixels([reloaded[i] for i in flips]),
            [chunk[i].question for i in flips], attack.max_new_tokens,
        )
        for i, a in zip(flips, again):
            verified[i] = not judge(a, chunk[i].answer, chunk[i].family, chunk[i].answer_type)
    return [
        {"kind": "attack", "key": key, "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint,
         "sample": s.id, "family": s.family, "attack": attack.name, "params": attack.params(),
         "reference": s.answer, "answer": ans, "flipped": bool(ok), "steps": st, "passes": ps, "linf": li,
         "image": p}
        for s, key, ans, ok, st, ps, li, p in zip(chunk, keys, res.answers, verified, res.steps, res.passes,
                                                  res.linf, paths)
    ]


def run_audit(
    models: list[VLM],
    samples: list[Sample],
    out: Path,
    cfg: AuditConfig,
    errors: list[InputError] | None = None,
    judge: Judge | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> RunStore:
    judge = judge or Judge()
    store = RunStore(out / "results.jsonl")
    record_errors(store, errors or [])
    for vlm in models:
        correct = clean_pass(vlm, samples, store, judge, cfg.batch)
        for name in cfg.attacks:
            attack = make_attack(name, cfg, judge)
            params = attack.params()
            chunks = [correct[i : i + cfg.batch] for i in range(0, len(correct), cfg.batch)]
            for j, chunk in enumerate(chunks):
                keys = [key_of(kind="attack", model=vlm.fingerprint, sample=sample_fingerprint(s), attack=params)
                        for s in chunk]
                if not all(k in store for k in keys):
                    store.put_many(attack_chunk(vlm, attack, chunk, keys, out, judge, cfg.verify_reload))
                if progress:
                    progress(f"{vlm.name} {name}", j + 1, len(chunks))
    return store
