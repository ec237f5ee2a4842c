"""Executors: the audit's units of work run here (local) or spread over a Ray cluster.

The driver (:func:`drive`) owns the plan and the store: per model, the clean
pass in fixed chunks of the sorted samples, then each attack in fixed chunks of
the clean-correct set, then layer recovery. An executor only runs units: the
local one calls a :class:`Worker` in this process; the Ray one keeps actors
that each hold a model (one per GPU when there are GPUs) and hands them units.
Because the units and their batches are the same, both give the same records;
records land in the driver's store as units finish, so an interrupted run
resumes from it, and a unit whose worker dies is retried on a restarted actor.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.audit import (
    AuditConfig,
    EditCache,
    attack_chunk,
    attack_order,
    attack_params,
    chunks_of,
    clean_chunk,
    clean_keys,
    correct_set,
    left_by_earlier,
    make_attack,
    record_errors,
    recovery_chunk,
    recovery_flips,
    recovery_keys,
    text_attack_chunk,
)
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM
from mmaudit.pathways.text import TEXT_ATTACKS
from mmaudit.pathways.text.evidence import ocr_evidence
from mmaudit.pathways.wrong import USES_WRONG, assign_wrong_answers
from mmaudit.store import RunStore, key_of

Progress = Callable[[str, int, int], None]


def attack_keys(fingerprint: str, chunk: list[Sample], params: dict) -> list[str]:
    """An attack record's key: model, sample, parameters and, for attacks that use one, the wrong answer."""
    uses = params.get("name") in USES_WRONG
    return [key_of(kind="attack", model=fingerprint, sample=sample_fingerprint(s), attack=params,
                   **({"wrong": s.meta.get("wrong_answer")} if uses else {})) for s in chunk]


class Worker:
    """One model and the samples; runs units and returns their records."""

    def __init__(self, model, samples: list[Sample], out: Path, cfg: AuditConfig, judge: Judge | None = None):
        self.vlm, self.out, self.cfg, self.judge = model, Path(out), cfg, judge or Judge()
        self.by_id = {s.id: s for s in samples}
        self.edits = EditCache(self.out)

    def meta(self) -> dict:
        return {"name": self.vlm.name, "level": self.vlm.level, "fingerprint": self.vlm.fingerprint}

    def pid(self) -> int:
        return os.getpid()

    def clean(self, ids: list[str]) -> list[dict]:
        return clean_chunk(self.vlm, [self.by_id[i] for i in ids], self.judge, self.out)

    def attack(self, name: str, ids: list[str]) -> list[dict]:
        chunk = [self.by_id[i] for i in ids]
        atk, params = make_attack(name, self.cfg, self.judge), attack_params(name, self.cfg)
        keys = attack_keys(self.vlm.fingerprint, chunk, params)
        if name in TEXT_ATTACKS:
            return text_attack_chunk(self.vlm, atk, chunk, keys, self.edits, self.judge, self.cfg, params)
        return attack_chunk(self.vlm, atk, chunk, keys, self.out, self.judge, self.cfg.verify_reload, params)

    def recovery(self, ids: list[str], adversarial: list[np.ndarray]) -> list[dict]:
        return recovery_chunk(self.vlm, [self.by_id[i] for i in ids], adversarial, self.judge, self.cfg)


class LocalExecutor:
    def __init__(self, models, samples: list[Sample], out: Path, cfg: AuditConfig, judge: Judge | None = None):
        assign_wrong_answers(samples, judge)  # no-op for samples the loader already gave one
        self.workers = [Worker(m, samples, out, cfg, judge) for m in models]

    def metas(self) -> list[dict]:
        return [w.meta() for w in self.workers]

    def run(self, model: int, method: str, calls: list[tuple]) -> Iterator[list[dict]]:
        for args in calls:
            yield getattr(self.workers[model], method)(*args)


def drive(executor, samples: list[Sample], out: Path, cfg: AuditConfig, errors: list[InputError] | None = None,
          progress: Progress | None = None) -> RunStore:
    """The plan: clean pass, attacks, recovery per model; every finished unit goes to the store at once."""
    store = RunStore(out / "results.jsonl")
    record_errors(store, errors or [])
    ordered = sorted(samples, key=lambda s: s.id)

    def run(model: int, method: str, calls: list[tuple], label: str, total: int) -> None:
        done = total - len(calls)
        for recs in executor.run(model, method, calls):
            store.put_many(recs)
            done += 1
            if progress:
                progress(label, done, total)
        if progress and not calls:
            progress(label, total, total)

    for k, meta in enumerate(executor.metas()):
        fp, name = meta["fingerprint"], meta["name"]
        chunks = chunks_of(ordered, cfg.batch)
        todo = [c for c in chunks if not all(key in store for key in clean_keys(fp, c))]
        run(k, "clean", [([s.id for s in c],) for c in todo], f"{name} clean", len(chunks))
        correct = correct_set(store, fp, ordered)
        for attack in attack_order(cfg):
            params = attack_params(attack, cfg)
            chunks = chunks_of(left_by_earlier(fp, attack, correct, store, cfg), cfg.batch)
            todo = [c for c in chunks if not all(key in store for key in attack_keys(fp, c, params))]
            run(k, "attack", [(attack, [s.id for s in c]) for c in todo], f"{name} {attack}", len(chunks))
        if "end_pgd" in cfg.attacks and cfg.recovery:
            by_id = {s.id: s for s in samples}
            flips = chunks_of(recovery_flips(store, fp, cfg), cfg.batch)
            todo = [c for c in flips if not all(key in store for key in
                                                recovery_keys(fp, [by_id[r["sample"]] for r in c], cfg))]
            calls = [([r["sample"] for r in c], [np.asarray(Image.open(out / r["image"]).convert("RGB")) for r in c])
                     for c in todo]
            if key_of(kind="recovery_excluded", model=fp) not in store:
                run(k, "recovery", calls, f"{name} layer recovery", len(flips))
    if "nat_evid" in cfg.attacks and cfg.ocr_limit:
        ocr_evidence(store, samples, make_attack("nat_evid", cfg), EditCache(out), cfg.ocr_limit, progress)
    return store


def run_audit(
    models: list[VLM],
    samples: list[Sample],
    out: Path,
    cfg: AuditConfig,
    errors: list[InputError] | None = None,
    judge: Judge | None = None,
    progress: Progress | None = None,
) -> RunStore:
    """The audit on models already loaded here (the local executor)."""
    return drive(LocalExecutor(models, samples, out, cfg, judge or Judge()), samples, out, cfg, errors, progress)


class _RayWorker:
    """A Worker inside a Ray actor: loads its model itself and ships the files its records name."""

    def __init__(self, spec: str, samples: list[Sample], cfg: AuditConfig, threads: int) -> None:
        import torch

        from mmaudit.models.load import load_model

        torch.set_num_threads(threads)  # the driver's count: float sums then match a local run bit for bit
        self.out = Path(tempfile.mkdtemp(prefix="mmaudit-worker-"))
        self.worker = Worker(load_model(spec), samples, self.out, cfg)

    def meta(self) -> dict:
        return self.worker.meta()

    def pid(self) -> int:
        return os.getpid()

    def call(self, method: str, args: tuple) -> tuple[list[dict], dict[str, bytes]]:
        recs = getattr(self.worker, method)(*args)
        files = {r["image"]: (self.out / r["image"]).read_bytes() for r in recs
                 if r.get("image") and (self.out / r["image"]).exists()}
        return recs, files


class RayExecutor:
    """Units spread over Ray actors: ``workers`` actors per model, each holding its model.

    On a cluster with GPUs every actor takes one GPU (``num_gpus=1``); on CPUs it
    takes ``cpus_per_worker``. Actors restart and their units are retried when a
    worker process dies (``max_restarts``, ``max_task_retries``).
    """

    def __init__(self, specs: list[str], samples: list[Sample], out: Path, cfg: AuditConfig, workers: int = 1,
                 address: str | None = None, cpus_per_worker: float = 1.0, retries: int = 3,
                 on_unit: Callable[[RayExecutor], None] | None = None, threads: int | None = None) -> None:
        import ray
        import torch

        if not ray.is_initialized():
            ray.init(address=address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                     include_dashboard=False, log_to_driver=False)
        gpus = ray.cluster_resources().get("GPU", 0)
        actor = ray.remote(max_restarts=retries, max_task_retries=retries)(_RayWorker)
        opts = {"num_gpus": 1} if gpus else {"num_cpus": cpus_per_worker}
        assign_wrong_answers(samples)  # fixed here, so every actor sees the same wrong answers
        ref = ray.put(samples)
        self.ray, self.out, self.on_unit = ray, Path(out), on_unit
        self._samples = ref  # held for as long as the actors live: a restarted actor is rebuilt from it
        threads = threads or torch.get_num_threads()
        self.actors = [[actor.options(**opts).remote(spec, ref, cfg, threads) for _ in range(workers)]
                       for spec in specs]

    def metas(self) -> list[dict]:
        return self.ray.get([group[0].meta.remote() for group in self.actors])

    def run(self, model: int, method: str, calls: list[tuple]) -> Iterator[list[dict]]:
        from ray.util import ActorPool

        pool = ActorPool(self.actors[model])
        for recs, files in pool.map(lambda a, args: a.call.remote(method, args), calls):
            for rel, data in files.items():
                path = self.out / rel
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
            yield recs
            if self.on_unit:
                self.on_unit(self)
