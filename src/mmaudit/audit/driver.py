"""The driver walks the plan against the store: per model, the clean pass, each attack, layer recovery.

It is the one writer of the run folder. Every unit an executor finishes goes
to disk at once, its files first, then its records (fsync'd), so an interrupted
run resumes from the store: a unit counts as done only when all its keys are
there, and its files were written before them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mmaudit.audit.config import AuditConfig, make_attack
from mmaudit.audit.evidence import ocr_evidence
from mmaudit.audit.executors import Executor, LocalExecutor
from mmaudit.audit.plan import AuditPlan, Unit, pixel_sources, transfer_units
from mmaudit.audit.units import EditCache
from mmaudit.data.images import load_rgb
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM
from mmaudit.pathways import registry
from mmaudit.store import RunStore, key_of

Progress = Callable[[str, int, int], None]


def record_errors(store: RunStore, errors: list[InputError]) -> None:
    store.put_many(
        {"kind": "error", "key": key_of(kind="error", sample=str(e.sample_id), field=e.field, reason=e.reason),
         "sample": str(e.sample_id), "field": e.field, "reason": e.reason}
        for e in errors
    )


NO_GRADIENTS = "black-box target: no gradients"


def not_run(meta: dict, attack: str, params: dict, reason: str) -> dict:
    """The record that says an attack could not run on a model (its cells read n/a, never 0)."""
    return {"kind": "not_run", "key": key_of(kind="not_run", model=meta["fingerprint"], attack=params),
            "model": meta["model"], "level": meta["level"], "fingerprint": meta["fingerprint"], "attack": attack,
            "params": params, "reason": reason}


def write_files(out: Path, files: dict[str, bytes]) -> None:
    """Each file once, whole (written aside, then renamed into place)."""
    for rel, data in files.items():
        path = out / rel
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)


def unit_runner(executor: Executor, store: RunStore, out: Path, progress: Progress | None):
    """``run(model, units, label, extra)``: the units not yet in the store, on that model, each result written as it
    comes (files, then records); ``extra(unit)`` gives a unit's further arguments when it is about to be sent."""

    def run(model: int, units: list[Unit], label: str, extra=lambda u: ()) -> None:
        todo = [u for u in units if not all(k in store for k in u.keys)]
        done = len(units) - len(todo)
        if progress:
            progress(label, done, len(units))
        for result in executor.run(model, ((u, extra(u)) for u in todo)):
            write_files(out, result.files)
            store.put_many(result.records)
            done += 1
            if progress:
                progress(label, done, len(units))

    return run


def start_model(run, store: RunStore, plan: AuditPlan, k: int, meta: dict) -> tuple[str, str]:
    """A model's record (where and how it ran) and its clean pass, which every later stage reads: (fp, name)."""
    fp = meta["fingerprint"]
    store.put({"kind": "model", "key": key_of(kind="model", model=fp, settings=meta)} | meta)
    run(k, plan.clean_units(fp), f"{meta['model']} clean")
    return fp, meta["model"]


def non_adaptive(run, k: int, plan: AuditPlan, store: RunStore, out: Path, meta: dict) -> None:
    """A model behind a delivery channel or defence shown its bare model's own perturbations (made for the bare
    model, the pipeline ignored): the non-adaptive attack, judged as a transfer on the pipeline's clean-correct
    set. The source is the target itself without the pipeline, so it never counts as black-box transfer."""
    bare, fp = meta["bare_fingerprint"], meta["fingerprint"]
    sources = {key: recs for key, recs in pixel_sources(store, {a: [p] for a, p in plan.params.items()}).items()
               if key[0] == bare}
    units = transfer_units(plan, fp, store, sources, bare)
    if not units:  # the bare model is not in this run (--adaptive-only)
        return
    run_shown(run, k, units, out, f"{meta['model']} non-adaptive")


def run_shown(run, k: int, units: list, out: Path, label: str) -> None:
    """Transfer units (unit, source, image paths): each source image read from the run folder when its unit is
    sent."""
    extra = {u: (s, p) for u, s, p in units}
    run(k, list(extra), label, lambda u: ([load_rgb(out / p, p)[0] for p in extra[u][1]], *extra[u]))


def drive(executor: Executor, plan: AuditPlan, out: Path, errors: list[InputError] | None = None,
          progress: Progress | None = None) -> RunStore:
    """Run what the plan says is left to do, unit by unit; every finished unit goes to the store at once."""
    out = Path(out)
    store = RunStore(out / "results.jsonl")
    record_errors(store, errors or [])
    run = unit_runner(executor, store, out, progress)
    try:
        for k in range(executor.count):
            meta = executor.meta(k)
            fp, name = start_model(run, store, plan, k, meta)
            for attack in plan.attacks:
                if meta.get("black_box") and registry.is_pixel(attack) and not registry.spec(attack).black_box:
                    store.put(not_run(meta, attack, plan.params[attack], NO_GRADIENTS))
                    continue
                run(k, plan.attack_units(fp, attack, store), f"{name} {attack}", lambda u: (plan.params[u.attack],))
            if meta.get("bare_fingerprint"):
                non_adaptive(run, k, plan, store, out, meta)
            if plan.recovery and key_of(kind="recovery_excluded", model=fp) not in store:
                pairs = plan.recovery_units(fp, store)
                paths = dict(pairs)  # adversarial images are read only for units still to run
                run(k, list(paths), f"{name} layer recovery", lambda u, paths=paths: (
                    [load_rgb(out / p, p)[0] for p in paths[u]],))
            executor.release(k)  # its slots go to the models still queued
    finally:
        executor.close()
    for attack in (a for a in plan.cfg.attacks if registry.spec(a).evidence_check and plan.cfg.ocr_limit):
        ocr_evidence(store, plan.samples, make_attack(attack, plan.cfg), EditCache(), plan.cfg.ocr_limit, progress)
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
    """The audit on models already loaded here (the local executor); the plan is built from ``samples``."""
    plan = AuditPlan.build(samples, cfg, judge=judge)
    return drive(LocalExecutor(models, plan, judge or Judge()), plan, out, errors, progress)

