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
from mmaudit.audit.executors import Executor, LocalExecutor
from mmaudit.audit.plan import AuditPlan, Unit
from mmaudit.audit.units import EditCache
from mmaudit.data.images import load_rgb
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM
from mmaudit.pathways.text.evidence import ocr_evidence
from mmaudit.store import RunStore, key_of

Progress = Callable[[str, int, int], None]


def record_errors(store: RunStore, errors: list[InputError]) -> None:
    store.put_many(
        {"kind": "error", "key": key_of(kind="error", sample=str(e.sample_id), field=e.field, reason=e.reason),
         "sample": str(e.sample_id), "field": e.field, "reason": e.reason}
        for e in errors
    )


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


def drive(executor: Executor, plan: AuditPlan, out: Path, errors: list[InputError] | None = None,
          progress: Progress | None = None) -> RunStore:
    """Run what the plan says is left to do, unit by unit; every finished unit goes to the store at once."""
    out = Path(out)
    store = RunStore(out / "results.jsonl")
    record_errors(store, errors or [])

    def run(model: int, units: list[Unit], label: str, extra=lambda u: ()) -> None:
        todo = [u for u in units if not all(k in store for k in u.keys)]
        done = len(units) - len(todo)
        if progress:
            progress(label, done, len(units))
        for result in executor.run(model, [(u, extra(u)) for u in todo]):
            write_files(out, result.files)
            store.put_many(result.records)
            done += 1
            if progress:
                progress(label, done, len(units))

    try:
        for k, meta in enumerate(executor.metas()):
            fp, name = meta["fingerprint"], meta["model"]
            store.put({"kind": "model", "key": key_of(kind="model", model=fp, settings=meta)} | meta)
            run(k, plan.clean_units(fp), f"{name} clean")
            for attack in plan.attacks:
                run(k, plan.attack_units(fp, attack, store), f"{name} {attack}", lambda u: (plan.params[u.attack],))
            if plan.recovery and key_of(kind="recovery_excluded", model=fp) not in store:
                pairs = plan.recovery_units(fp, store)
                paths = dict(pairs)  # adversarial images are read only for units still to run
                run(k, list(paths), f"{name} layer recovery", lambda u, paths=paths: (
                    [load_rgb(out / p, p)[0] for p in paths[u]],))
    finally:
        executor.close()
    if "nat_evid" in plan.cfg.attacks and plan.cfg.ocr_limit:
        ocr_evidence(store, plan.samples, make_attack("nat_evid", plan.cfg), EditCache(), plan.cfg.ocr_limit,
                     progress)
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

