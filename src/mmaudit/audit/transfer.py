"""Transfer: the run's saved adversarial images shown to other models, white-box or behind an endpoint.

A pixel attack needs gradients, but its adversarial PNGs (exact to the bit: the store checked each decodes to
the pixels that were judged) can be shown to any model. For every target, every saved image of every source
model's pixel attacks (flipped on the source or not) is asked with the same prompt, and a flip is judged on the
*target's own* clean-correct set, so a source image counts only where the target answered that question right.
A target new to the run also gets its clean pass and the rendered-text attacks directly (their edited images
depend on no model); the pixel attacks it did not take are marked not run. The diagonal (a model shown its own
images) re-asks what the audit verified and must give the white-box ASR.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from mmaudit.audit.driver import NO_GRADIENTS, Progress, not_run, start_model, unit_runner
from mmaudit.audit.executors import Executor
from mmaudit.audit.plan import AuditPlan, Unit, chunks_of, correct_set
from mmaudit.data.images import load_rgb
from mmaudit.data.sample import sample_fingerprint
from mmaudit.pathways import registry
from mmaudit.store import RunStore, key_of

NOT_ATTACKED = "a transfer target: not attacked white-box in this run"


def pixel_sources(store: RunStore, params: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    """(source fingerprint, pixel attack) -> the source's attack records that saved an image, with the run's
    parameters, in sample order."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in store.records("attack"):
        if registry.is_pixel(r["attack"]) and r.get("image") and params.get(r["attack"]) == r["params"]:
            out[(r["fingerprint"], r["attack"])].append(r)
    return {k: sorted(v, key=lambda r: r["sample"]) for k, v in sorted(out.items())}


def transfer_key(target: str, source: dict, sample_fp: str) -> str:
    return key_of(kind="transfer", model=target, source=source["fingerprint"], sample=sample_fp,
                  attack=source["params"], image=source["image"])


def transfer_units(plan: AuditPlan, target: str, store: RunStore,
                   sources: dict[tuple[str, str], list[dict]]) -> list[tuple[Unit, dict, list[str]]]:
    """Per (source, attack), the target's clean-correct samples that have a source image, in the plan's fixed
    chunks: (unit, source, image paths)."""
    correct = {s.id for s in correct_set(store, target, plan.samples)}
    out = []
    for (fp, attack), recs in sources.items():
        by_sample = {r["sample"]: r for r in recs if r["sample"] in correct}
        source = {"model": recs[0]["model"], "fingerprint": fp, "attack": attack, "params": plan.params[attack]}
        for chunk in chunks_of([plan.by_id[i] for i in sorted(by_sample)], plan.cfg.batch):
            paths = [by_sample[s.id]["image"] for s in chunk]
            keys = tuple(transfer_key(target, source | {"image": p}, sample_fingerprint(s))
                         for s, p in zip(chunk, paths))
            out.append((Unit("transfer", tuple(s.id for s in chunk), keys, attack), source, paths))
    return out


def drive_transfer(executor: Executor, plan: AuditPlan, out: Path, progress: Progress | None = None) -> RunStore:
    """Every target: its clean pass and rendered-text attacks where the run lacks them, then every source's
    pixel-attack images. Resumable like the audit: a unit is done when its keys are in the store."""
    out = Path(out)
    store = RunStore(out / "results.jsonl")
    sources = pixel_sources(store, plan.params)  # the run's images; new targets add none
    run = unit_runner(executor, store, out, progress)
    try:
        for k, meta in enumerate(executor.metas()):
            fp, name = start_model(run, store, plan, k, meta)
            for attack in plan.attacks:
                if registry.is_text(attack):
                    run(k, plan.attack_units(fp, attack, store), f"{name} {attack}",
                        lambda u: (plan.params[u.attack],))
                elif not any(r["fingerprint"] == fp and r["attack"] == attack for r in store.records("attack")):
                    reason = NO_GRADIENTS if meta.get("black_box") else NOT_ATTACKED
                    store.put(not_run(meta, attack, plan.params[attack], reason))
            units = transfer_units(plan, fp, store, sources)
            extra = {u: (s, p) for u, s, p in units}
            run(k, list(extra), f"{name} transfer", lambda u, extra=extra: (
                [load_rgb(out / p, p)[0] for p in extra[u][1]], *extra[u]))
    finally:
        executor.close()
    return store
