"""The audit's units of work: clean pass, both pathways over a model's clean-correct set, layer recovery.

:mod:`mmaudit.execution` plans and runs them (this module never imports it).
Units of work are fixed chunks of a model's clean-correct set (sorted by sample
id), so a resumed run forms exactly the batches an uninterrupted one did and
ends with identical numbers. Each chunk's records are written together.
Rendered-text edits do not depend on the model: each is made once per sample
and shared by every model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM, pixels
from mmaudit.pathways import ORDER
from mmaudit.pathways.diagnostics.recovery import recover, unsupported
from mmaudit.pathways.pixel import ATTACKS
from mmaudit.pathways.text import TEXT_ATTACKS, Edit, LayoutEditor
from mmaudit.pathways.text.editors import ImageEditor
from mmaudit.pathways.text.runner import TextRunConfig, run_text_chunk
from mmaudit.store import RunStore, key_of


@dataclass
class AuditConfig:
    attacks: list[str] = field(default_factory=lambda: list(ORDER))
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


MAX_NEW_TOKENS = 16  # the clean pass and every attack's check decode the same length

# "full": every attack on all of C (per-attack ASR exact). "union" (AutoAttack-style): End-PGD
# on C, Vis-PGD on what End-PGD left, MANTIS on what both left. R0, R+ and delta are still
# exact (MANTIS's delta only counts samples its baselines left); the ASR of Vis-PGD and
# MANTIS become lower bounds. Text attacks are cheap and always run on all of C.
SCHEDULES = ("full", "union")
UNION_ORDER = ("end_pgd", "vis_pgd", "mantis")


def make_attack(name: str, cfg: AuditConfig, judge: Judge | None = None):
    judge = judge or Judge()
    if name in ATTACKS:
        return ATTACKS[name](eps=cfg.eps, steps=cfg.steps, alpha=cfg.alpha, seed=cfg.seed, early_stop=cfg.early_stop,
                             downscale=cfg.downscale, max_new_tokens=MAX_NEW_TOKENS, judge=judge)
    if name == "typo_evid":
        return TEXT_ATTACKS[name](max_chars=cfg.max_chars, judge=judge, position=cfg.typo_position)
    if name == "nat_evid":
        return TEXT_ATTACKS[name](max_chars=cfg.max_chars, judge=judge, editor=cfg.editor)
    raise ValueError(f"unknown attack {name!r}; choose from {ORDER}")


def attack_params(name: str, cfg: AuditConfig) -> dict:
    """What keys an attack's records: its own parameters, plus the text-run settings for text attacks."""
    params = make_attack(name, cfg).params()
    if name in TEXT_ATTACKS:
        params = params | {"run": asdict(cfg.text)}
    elif cfg.schedule == "union":
        params = params | {"schedule": "union"}
    return params


def attack_order(cfg: AuditConfig) -> list[str]:
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
    if cfg.schedule == "full":
        return list(cfg.attacks)
    return [a for a in UNION_ORDER if a in cfg.attacks] + [a for a in cfg.attacks if a not in UNION_ORDER]


def left_by_earlier(fingerprint: str, name: str, correct: list[Sample], store: RunStore,
                    cfg: AuditConfig) -> list[Sample]:
    """The part of C an attack runs on: all of it, or under the union schedule what earlier attacks left."""
    if cfg.schedule == "full" or name not in UNION_ORDER:
        return correct
    earlier = {a: attack_params(a, cfg) for a in UNION_ORDER[: UNION_ORDER.index(name)] if a in cfg.attacks}
    done = {r["sample"] for r in store.records("attack") if r["fingerprint"] == fingerprint
            and r["attack"] in earlier and r["params"] == earlier[r["attack"]] and r["flipped"]}
    return [s for s in correct if s.id not in done]


def save_png(image: np.ndarray, path: Path) -> None:
    """Write once and check the round trip: what is saved is exactly what was judged."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    Image.fromarray(image).save(tmp)
    with Image.open(tmp) as im:
        if not np.array_equal(np.asarray(im.convert("RGB")), image):
            raise RuntimeError(f"{path}: saved image does not round-trip")
    tmp.replace(path)


def record_errors(store: RunStore, errors: list[InputError]) -> None:
    store.put_many(
        {"kind": "error", "key": key_of(kind="error", sample=str(e.sample_id), field=e.field, reason=e.reason),
         "sample": str(e.sample_id), "field": e.field, "reason": e.reason}
        for e in errors
    )


def clean_keys(fingerprint: str, samples: list[Sample]) -> list[str]:
    return [key_of(kind="clean", model=fingerprint, sample=sample_fingerprint(s)) for s in samples]


def clean_chunk(vlm: VLM, chunk: list[Sample], judge: Judge, out: Path) -> list[dict]:
    """Answer a chunk on its clean images (and keep each image for the report)."""
    answers = vlm.generate(pixels([s.image for s in chunk]), [s.question for s in chunk], MAX_NEW_TOKENS)
    for s in chunk:
        save_png(s.image, out / "clean" / f"{sample_fingerprint(s)}.png")
    return [
        {"kind": "clean", "key": k, "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint,
         "sample": s.id, "family": s.family, "answer_type": s.answer_type, "reference": s.answer,
         "question": s.question, "answer": a, "correct": bool(judge.correct(a, s)),
         "image": f"clean/{sample_fingerprint(s)}.png"}
        for s, a, k in zip(chunk, answers, clean_keys(vlm.fingerprint, chunk))
    ]


def correct_set(store: RunStore, fingerprint: str, samples: list[Sample]) -> list[Sample]:
    """The clean-correct set C, sorted by id."""
    keys = dict(zip((s.id for s in samples), clean_keys(fingerprint, samples)))
    return sorted((s for s in samples if store.get(keys[s.id])["correct"]), key=lambda s: s.id)


def chunks_of(items: list, size: int) -> list[list]:
    """Fixed chunks: a resumed run (or another executor) forms exactly the same batches. Samples of one image
    shape go together (a batch is one pixel tensor), in the order each shape first appears."""
    groups: dict = {}
    for it in items:
        groups.setdefault(getattr(getattr(it, "image", None), "shape", None), []).append(it)
    return [g[i : i + size] for g in groups.values() for i in range(0, len(g), size)]


def base_record(vlm: VLM, s: Sample, key: str, attack: str, params: dict) -> dict:
    return {"kind": "attack", "key": key, "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint,
            "sample": s.id, "family": s.family, "attack": attack, "params": params, "reference": s.answer,
            "question": s.question}


def attack_chunk(vlm: VLM, attack, chunk: list[Sample], keys: list[str], out: Path, judge: Judge,
                 verify: bool, params: dict) -> list[dict]:
    res = attack(vlm, chunk)
    paths = []
    for adv, key in zip(res.adv_uint8, keys):
        path = out / "adv" / attack.name / f"{key}.png"
        save_png(adv, path)
        paths.append(str(path.relative_to(out)))
    verified = list(res.flipped)
    flips = [i for i, f in enumerate(res.flipped) if f]
    if verify and flips:  # a flip counts only if the reloaded PNG still flips
        reloaded = [np.asarray(Image.open(out / paths[i]).convert("RGB")) for i in flips]
        again = vlm.generate(pixels(reloaded), [chunk[i].question for i in flips], attack.max_new_tokens)
        for i, a in zip(flips, again):
            verified[i] = not judge.correct(a, chunk[i])
    return [
        base_record(vlm, s, key, attack.name, params)
        | {"answer": ans, "flipped": bool(ok), "steps": st, "passes": ps, "linf": li, "image": p}
        for s, key, ans, ok, st, ps, li, p in zip(chunk, keys, res.answers, verified, res.steps, res.passes,
                                                  res.linf, paths)
    ]


class EditCache:
    """Each text attack's edit of each sample, made once, saved once, shared by all models."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._edits: dict[tuple[str, str], tuple[Edit | InputError, str | None]] = {}

    def get(self, attack, s: Sample) -> tuple[Edit | InputError, str | None]:
        k = (attack.name, s.id)
        if k not in self._edits:
            try:
                edit: Edit | InputError = attack(s)
            except InputError as e:
                edit = e
            path = None
            if isinstance(edit, Edit):
                name = key_of(sample=sample_fingerprint(s), attack=attack.params(), wrong=s.meta.get("wrong_answer"))
                path = f"adv/{attack.name}/{name}.png"
                save_png(edit.image, self.out / path)
            self._edits[k] = (edit, path)
        return self._edits[k]


def text_attack_chunk(vlm: VLM, attack, chunk: list[Sample], keys: list[str], edits: EditCache, judge: Judge,
                      cfg: AuditConfig, params: dict) -> list[dict]:
    got = [edits.get(attack, s) for s in chunk]
    results = run_text_chunk(vlm, chunk, [e for e, _ in got], judge, cfg.text)
    return [base_record(vlm, s, key, attack.name, params) | res | {"image": path, "passes": 0}
            for s, key, res, (_, path) in zip(chunk, keys, results, got)]


def recovery_flips(store: RunStore, fingerprint: str, cfg: AuditConfig) -> list[dict]:
    """The first ``cfg.recovery`` End-PGD flips of a model, by sample id."""
    end_params = attack_params("end_pgd", cfg)
    return sorted((r for r in store.records("attack") if r["fingerprint"] == fingerprint
                   and r["attack"] == "end_pgd" and r["params"] == end_params and r["flipped"]),
                  key=lambda r: r["sample"])[: cfg.recovery]


def recovery_keys(fingerprint: str, chunk: list[Sample], cfg: AuditConfig) -> list[str]:
    return [key_of(kind="recovery", model=fingerprint, sample=sample_fingerprint(s),
                   attack=attack_params("end_pgd", cfg), positions=cfg.recovery_positions) for s in chunk]


def recovery_chunk(vlm: VLM, chunk: list[Sample], adversarial: list[np.ndarray], judge: Judge,
                   cfg: AuditConfig) -> list[dict]:
    why = unsupported(vlm)
    if why:
        return [{"kind": "recovery_excluded", "key": key_of(kind="recovery_excluded", model=vlm.fingerprint),
                 "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint, "reason": why}]
    rows = recover(vlm, chunk, adversarial, judge, MAX_NEW_TOKENS, cfg.recovery_positions)
    return [{"kind": "recovery", "key": k, "model": vlm.name, "level": vlm.level, "fingerprint": vlm.fingerprint,
             "positions": cfg.recovery_positions} | row
            for k, row in zip(recovery_keys(vlm.fingerprint, chunk, cfg), rows)]
