"""Executors run units of work, nothing else: here (local) or spread over a Ray cluster.

A :class:`Worker` holds one model and the plan's samples (wrong answers already
fixed) and runs a unit by name. The local executor keeps one worker per model
in this process; the Ray executor keeps actors that each load a model (one per
GPU when there are GPUs) and hands them units. Because the units and their
batches are the same, both give the same records. Units return their files as
bytes, so an actor writes nothing to disk; a unit whose worker dies is retried
on a restarted actor.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import torch

from mmaudit.audit.config import AuditConfig, make_attack
from mmaudit.audit.plan import AuditPlan, Unit, self_referenced
from mmaudit.audit.units import (
    EditCache,
    UnitResult,
    clean_unit,
    model_fields,
    model_settings,
    pixel_attack_unit,
    recovery_unit,
    sweep_unit,
    text_attack_unit,
    transfer_unit,
)
from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.pathways import registry


class Executor(Protocol):
    def metas(self) -> list[dict]:
        """Per model: name, level, fingerprint and where and how it runs (device, dtype, GPU, the adapter's
        settings), as the model record keeps them."""
        ...

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        """Run (unit, extra arguments) pairs on a model, yielding results in order."""
        ...

    def close(self) -> None: ...


class OutOfMemory(RuntimeError):
    """Even one sample does not fit: the message says what to lower."""


def _halves(unit: Unit, extra: tuple) -> list[tuple[Unit, tuple]]:
    """A unit cut in two, with every extra argument that lists one item per sample cut alike."""
    n = len(unit.ids)
    cut = (n + 1) // 2
    out = []
    for a, b in ((0, cut), (cut, n)):
        part = Unit(unit.method, unit.ids[a:b], unit.keys[a:b], unit.attack,
                    unit.references[a:b] if unit.references is not None else None)
        out.append((part, tuple(e[a:b] if isinstance(e, (list, tuple)) and len(e) == n else e for e in extra)))
    return out


class Worker:
    """One model and the plan's samples; runs units and returns their records and files.

    A unit that runs out of accelerator memory is cut in half and each half run (recursively); the largest size
    that ran is remembered, so later units are cut before they fail. Results never depend on batch composition,
    so the records are those of the whole unit, each once.
    """

    def __init__(self, model, samples: list[Sample], cfg: AuditConfig, judge: Judge | None = None,
                 edits: EditCache | None = None) -> None:
        self.vlm, self.cfg, self.judge = model, cfg, judge or Judge()
        self.by_id = {s.id: s for s in samples}
        self.edits = edits or EditCache()
        self.cap: int | None = None  # the most samples a unit may hold here, once memory ran out
        self.splits = 0

    def meta(self) -> dict:
        return model_fields(self.vlm) | model_settings(self.vlm)

    def pid(self) -> int:
        return os.getpid()

    def run(self, unit: Unit, *extra) -> UnitResult:
        if self.cap is not None and len(unit.ids) > self.cap:
            return self._in_halves(unit, extra)
        try:
            return self._run(unit, *extra)
        except torch.OutOfMemoryError:
            pass  # leave the handler first: the traceback holds the failed batch's tensors
        free_memory()
        if len(unit.ids) == 1:
            raise OutOfMemory(f"{self.vlm.name}: one sample ({unit.ids[0]}) does not fit in memory for "
                              f"{unit.attack or unit.method}; lower --max-pixels (Qwen family), use --downscale or "
                              "--activation-checkpointing layers, or use a larger device")
        self.cap = min(self.cap or len(unit.ids), (len(unit.ids) + 1) // 2)  # the halves that come next
        self.splits += 1
        return self._in_halves(unit, extra)

    def _in_halves(self, unit: Unit, extra: tuple) -> UnitResult:
        return UnitResult.merge([self.run(u, *e) for u, e in _halves(unit, extra)])

    def _run(self, unit: Unit, *extra) -> UnitResult:
        chunk = [self.by_id[i] for i in unit.ids]
        if unit.references is not None:
            chunk = [self_referenced(s, ref) for s, ref in zip(chunk, unit.references)]
        keys = list(unit.keys)
        if unit.method == "clean":
            return clean_unit(self.vlm, chunk, keys, self.judge, self.cfg.reference)
        if unit.method == "recovery":
            (adversarial,) = extra
            return recovery_unit(self.vlm, chunk, adversarial, self.judge, self.cfg)
        if unit.method == "transfer":
            images, source, paths = extra
            return transfer_unit(self.vlm, chunk, keys, images, source, paths, self.judge)
        if unit.method == "sweep":
            (run,) = extra
            return sweep_unit(self.vlm, chunk, keys, self.judge, run)
        atk = make_attack(unit.attack, self.cfg, self.judge)
        params = extra[0]
        if registry.is_text(unit.attack):
            return text_attack_unit(self.vlm, atk, chunk, keys, self.edits, self.judge, self.cfg, params)
        return pixel_attack_unit(self.vlm, atk, chunk, keys, self.judge, self.cfg.verify_reload, params)


class LocalExecutor:
    """Models already loaded in this process; one edit cache shared by all of them."""

    def __init__(self, models, plan: AuditPlan, judge: Judge | None = None) -> None:
        edits = EditCache()
        self.workers = [Worker(m, plan.samples, plan.cfg, judge, edits) for m in models]

    def metas(self) -> list[dict]:
        return [w.meta() for w in self.workers]

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        for unit, extra in units:  # lazily: a unit's images are read when it is about to run
            yield self.workers[model].run(unit, *extra)

    def close(self) -> None:
        return None


class _RayWorker:
    """A Worker inside a Ray actor: it loads its model itself."""

    def __init__(self, spec: str, samples: list[Sample], cfg: AuditConfig, threads: int, placement=None) -> None:
        from mmaudit.models.load import load_model

        torch.set_num_threads(threads)  # the driver's count: float sums then match a local run bit for bit
        self.worker = Worker(load_model(spec, placement), samples, cfg)  # the GPU Ray gave this actor is "cuda"

    def meta(self) -> dict:
        return self.worker.meta()

    def pid(self) -> int:
        return os.getpid()

    def call(self, unit: Unit, extra: tuple) -> UnitResult:
        return self.worker.run(unit, *extra)


class RayExecutor:
    """Units spread over Ray actors: ``workers`` actors per model, each holding its model.

    On a cluster with GPUs every actor takes one GPU (``num_gpus=1``); on CPUs it
    takes ``cpus_per_worker``. Actors restart and their units are retried when a
    worker process dies (``max_restarts``, ``max_task_retries``).
    """

    def __init__(self, specs: list[str], plan: AuditPlan, workers: int = 1, address: str | None = None,
                 cpus_per_worker: float = 1.0, retries: int = 3,
                 on_unit: Callable[[RayExecutor], None] | None = None, threads: int | None = None,
                 placement=None) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                     include_dashboard=False, log_to_driver=False)
        gpus = ray.cluster_resources().get("GPU", 0)
        actor = ray.remote(max_restarts=retries, max_task_retries=retries)(_RayWorker)
        opts = {"num_gpus": 1} if gpus else {"num_cpus": cpus_per_worker}
        ref = ray.put(plan.samples)
        self.ray, self.on_unit = ray, on_unit
        self._samples = ref  # held for as long as the actors live: a restarted actor is rebuilt from it
        threads = threads or torch.get_num_threads()
        self.actors = [[actor.options(**opts).remote(spec, ref, plan.cfg, threads, placement)
                        for _ in range(workers)] for spec in specs]

    def metas(self) -> list[dict]:
        return self.ray.get([group[0].meta.remote() for group in self.actors])

    def run(self, model: int, units: Iterable[tuple[Unit, tuple]]) -> Iterator[UnitResult]:
        from ray.util import ActorPool

        pool = ActorPool(self.actors[model])
        for result in pool.map(lambda a, u: a.call.remote(*u), units):
            yield result
            if self.on_unit:
                self.on_unit(self)

    def close(self) -> None:
        """End the actors (their models' memory goes with them)."""
        for group in self.actors:
            for a in group:
                self.ray.kill(a)
        self.actors = []



def free_memory() -> None:
    """Return what a failed unit held to the accelerator before the halves run."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
