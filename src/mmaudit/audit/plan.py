"""The audit's plan: which units of work exist, their samples, chunks and store keys, fixed once per run.

A plan is built once from the loaded samples and the config. Building it is the
one place where each sample's task-matching wrong answer is fixed (from the
vocabulary of everything loaded), so every executor and every model sees the
same wrong answers, and the keys of the attacks that use one include it.

Units are fixed chunks of a model's samples sorted by id, so a resumed run (or
another executor) forms exactly the batches an uninterrupted one did and ends
with identical numbers. Which units exist after the clean pass depends on the
store (the clean-correct set C, and under the union schedule the flips of
earlier attacks); the plan reads it, never writes it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from mmaudit.audit.config import AuditConfig, attack_order, attack_params
from mmaudit.data.loaders import answer_type_of
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.judge.match import Judge
from mmaudit.pathways import registry
from mmaudit.pathways.wrong import OcrReader, assign_wrong_answers
from mmaudit.store import RunStore, key_of


@dataclass(frozen=True)
class Unit:
    """One unit of work: a worker ``method`` over the samples ``ids``; done when every key is in the store.
    ``references`` (``--reference self``): per sample, the model's own clean answer and the wrong answer drawn
    for it, which stand in for the dataset's."""

    method: str  # "clean", "attack", "recovery", "transfer" or "sweep"
    ids: tuple[str, ...]
    keys: tuple[str, ...]
    attack: str | None = None
    references: tuple[tuple[str, ...], ...] | None = None


SELF_FIELDS = ("answer", "answer_type", "wrong_answer", "wrong_kind", "wrong_source")


def self_referenced(s: Sample, ref: tuple[str, ...]) -> Sample:
    """``s`` with a model's own clean answer as its reference and the wrong answer drawn for it."""
    answer, answer_type, wrong, kind, source = ref
    meta = {k: v for k, v in s.meta.items() if k != "answers"} | {"wrong_answer": wrong, "wrong_kind": kind,
                                                                   "wrong_source": source, "label": s.answer}
    return replace(s, answer=answer, answer_type=answer_type, meta=meta)

def image_area(item) -> int:
    image = getattr(item, "image", None)
    return int(image.shape[0] * image.shape[1]) if image is not None else 0


def chunks_of(items: list, size: int) -> list[list]:
    """Fixed chunks: a resumed run (or another executor) forms exactly the same batches. Images of any sizes
    share a batch (every image keeps its own perturbation); items are ordered by image area, which sets a
    model's image-token count, so a batch's padding stays small (a stable sort: equal areas keep their order)."""
    ordered = sorted(items, key=image_area)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def clean_keys(fingerprint: str, samples: Iterable[Sample], reference: str = "label") -> list[str]:
    mode = {"reference": reference} if reference != "label" else {}
    return [key_of(kind="clean", model=fingerprint, sample=sample_fingerprint(s), **mode) for s in samples]


def attack_keys(fingerprint: str, chunk: Iterable[Sample], params: dict) -> list[str]:
    """An attack record's key: model, sample, parameters and, for attacks that use one, the wrong answer."""
    uses = registry.uses_wrong(params)
    return [key_of(kind="attack", model=fingerprint, sample=sample_fingerprint(s), attack=params,
                   **({"wrong": s.meta.get("wrong_answer")} if uses else {})) for s in chunk]


def recovery_keys(fingerprint: str, chunk: Iterable[Sample], cfg: AuditConfig) -> list[str]:
    return [key_of(kind="recovery", model=fingerprint, sample=sample_fingerprint(s),
                   attack=attack_params("end_pgd", cfg), positions=cfg.recovery_positions) for s in chunk]


def correct_set(store: RunStore, fingerprint: str, samples: list[Sample]) -> list[Sample]:
    """The clean-correct set C, sorted by id."""
    keys = dict(zip((s.id for s in samples), clean_keys(fingerprint, samples)))
    return sorted((s for s in samples if store.get(keys[s.id])["correct"]), key=lambda s: s.id)


def flipped_by(store: RunStore, fingerprint: str, params: dict[str, dict]) -> set[str]:
    """Samples that any of the attacks (name -> params) flipped for this model."""
    return {r["sample"] for r in store.records("attack") if r["fingerprint"] == fingerprint
            and r["attack"] in params and r["params"] == params[r["attack"]] and r["flipped"]}


@dataclass
class AuditPlan:
    """The samples (wrong answers fixed, sorted by id), the attacks in schedule order with their parameters,
    and the units each stage consists of."""

    samples: list[Sample]
    cfg: AuditConfig
    attacks: list[str] = field(init=False)
    params: dict[str, dict] = field(init=False)

    ocr: OcrReader | None = None
    judge: Judge | None = None

    def __post_init__(self) -> None:
        self.samples = sorted(self.samples, key=lambda s: s.id)
        self.by_id = {s.id: s for s in self.samples}
        self.attacks = attack_order(self.cfg)
        self.params = {a: attack_params(a, self.cfg) for a in self.attacks}
        self._references: dict[str, dict[str, tuple[str, ...]]] = {}

    @classmethod
    def build(cls, samples: list[Sample], cfg: AuditConfig, pool: Iterable[Sample] | None = None,
              ocr: OcrReader | None = None, judge: Judge | None = None) -> AuditPlan:
        """Fix each sample's wrong answer (from ``pool``'s vocabulary, default the samples; for text answers
        without layout metadata, also from the image's ``ocr`` text), then plan. A sample that already
        carries one keeps it."""
        assign_wrong_answers(samples, judge, ocr=ocr, vocabulary_from=pool)
        return cls(list(samples), cfg, ocr=ocr, judge=judge)

    def references(self, fingerprint: str, store: RunStore) -> dict[str, tuple[str, ...]]:
        """``--reference self``: per answered sample, the model's clean answer as the reference and a wrong answer
        drawn for it (from the vocabulary of the model's own answers), fixed once per model, here."""
        if fingerprint not in self._references:
            answers = {s.id: store.get(k)["answer"].strip()
                       for s, k in zip(self.samples, clean_keys(fingerprint, self.samples, "self"))}
            own = [replace(s, answer=answers[s.id], answer_type=answer_type_of(answers[s.id]),
                           meta={k: v for k, v in s.meta.items() if not k.startswith("wrong_") and k != "answers"})
                   for s in self.samples if answers[s.id]]
            assign_wrong_answers(own, self.judge, ocr=self.ocr)
            self._references[fingerprint] = {
                s.id: (s.answer, s.answer_type, *(s.meta.get(f) for f in SELF_FIELDS[2:])) for s in own
                if s.meta.get("wrong_answer") is not None}
        return self._references[fingerprint]

    def model_samples(self, fingerprint: str, store: RunStore) -> list[Sample]:
        """The samples as this model's attacks see them: the plan's, or under ``--reference self`` each with the
        model's own answer as its reference."""
        if self.cfg.reference == "label":
            return self.samples
        refs = self.references(fingerprint, store)
        return [self_referenced(s, refs[s.id]) for s in self.samples if s.id in refs]

    @property
    def recovery(self) -> bool:
        return "end_pgd" in self.cfg.attacks and self.cfg.recovery > 0

    def _units(self, method: str, chunks: list[list[Sample]], keys, attack: str | None = None,
               fingerprint: str | None = None, store: RunStore | None = None) -> list[Unit]:
        refs = self.references(fingerprint, store) if self.cfg.reference == "self" and store is not None else None
        return [Unit(method, tuple(s.id for s in c), tuple(keys(c)), attack,
                     tuple(refs[s.id] for s in c) if refs is not None else None) for c in chunks]

    def clean_units(self, fingerprint: str) -> list[Unit]:
        return self._units("clean", chunks_of(self.samples, self.cfg.batch),
                           lambda c: clean_keys(fingerprint, c, self.cfg.reference))

    def attack_units(self, fingerprint: str, attack: str, store: RunStore) -> list[Unit]:
        """The attack over C: all of it, or under the union schedule what earlier attacks left."""
        # C: the clean-correct set, or under --reference self every sample the model answered
        todo = (correct_set(store, fingerprint, self.samples) if self.cfg.reference == "label"
                else self.model_samples(fingerprint, store))
        union = registry.union_order()
        if self.cfg.schedule == "union" and attack in union:
            earlier = union[: union.index(attack)]
            done = flipped_by(store, fingerprint, {a: self.params[a] for a in earlier if a in self.params})
            todo = [s for s in todo if s.id not in done]
        params = self.params[attack]
        return self._units("attack", chunks_of(todo, self.cfg.batch), lambda c: attack_keys(fingerprint, c, params),
                           attack, fingerprint, store)

    def recovery_flips(self, fingerprint: str, store: RunStore) -> list[dict]:
        """The first ``cfg.recovery`` End-PGD flips of a model, by sample id."""
        end_params = attack_params("end_pgd", self.cfg)
        return sorted((r for r in store.records("attack") if r["fingerprint"] == fingerprint
                       and r["attack"] == "end_pgd" and r["params"] == end_params and r["flipped"]),
                      key=lambda r: r["sample"])[: self.cfg.recovery]

    def recovery_units(self, fingerprint: str, store: RunStore) -> list[tuple[Unit, list[str]]]:
        """Layer recovery over the first flips, each unit with the adversarial images (run-folder paths) it
        patches."""
        flips = chunks_of(self.recovery_flips(fingerprint, store), self.cfg.batch)
        by_id = {s.id: s for s in self.model_samples(fingerprint, store)}
        units = self._units("recovery", [[by_id[r["sample"]] for r in c] for c in flips],
                            lambda c: recovery_keys(fingerprint, c, self.cfg), None, fingerprint, store)
        return [(u, [r["image"] for r in c]) for u, c in zip(units, flips)]


def pixel_sources(store: RunStore, params: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    """(source fingerprint, pixel attack) -> the source's records that saved an image with the parameters asked
    for (a white-box attack's at the run's, a crafted one's at this transfer's), in sample order."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in [*store.records("attack"), *store.records("crafted")]:
        if registry.is_pixel(r["attack"]) and r.get("image") and r["params"] in params.get(r["attack"], []):
            out[(r["fingerprint"], r["attack"])].append(r)
    return {k: sorted(v, key=lambda r: r["sample"]) for k, v in sorted(out.items())}


def transfer_key(target: str, source: dict, sample_fp: str) -> str:
    return key_of(kind="transfer", model=target, source=source["fingerprint"], sample=sample_fp,
                  attack=source["params"], image=source["image"])


def transfer_units(plan: AuditPlan, target: str, store: RunStore, sources: dict[tuple[str, str], list[dict]],
                   bare: str | None = None) -> list[tuple[Unit, dict, list[str]]]:
    """Per (source, attack), the target's clean-correct samples that have a source image, in the plan's fixed
    chunks: (unit, source, image paths). ``bare``: the fingerprint of the model the target is behind a pipeline
    of; its images are the target's non-adaptive attack (made from the target's own weights), not a transfer."""
    correct = {s.id for s in correct_set(store, target, plan.samples)}
    out = []
    for (fp, attack), recs in sources.items():
        by_sample = {r["sample"]: r for r in recs if r["sample"] in correct}
        source = {"model": recs[0]["model"], "fingerprint": fp, "attack": attack, "params": recs[0]["params"],
                  "members": recs[0].get("members", [fp])}
        if fp == bare:
            source |= {"members": [fp, target], "non_adaptive": True}
        for chunk in chunks_of([plan.by_id[i] for i in sorted(by_sample)], plan.cfg.batch):
            paths = [by_sample[s.id]["image"] for s in chunk]
            keys = tuple(transfer_key(target, source | {"image": p}, sample_fingerprint(s))
                         for s, p in zip(chunk, paths))
            out.append((Unit("transfer", tuple(s.id for s in chunk), keys, attack), source, paths))
    return out
