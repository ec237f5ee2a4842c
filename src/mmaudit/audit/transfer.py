"""Transfer: the run's saved adversarial images shown to other models, white-box or behind an endpoint, and images
made to transfer (a surrogate ensemble's, crafted with no gradient or query of any target).

A pixel attack needs gradients, but its adversarial PNGs (exact to the bit: the store checked each decodes to
the pixels that were judged) can be shown to any model. For every target, every saved image of every source
model's pixel attacks (flipped on the source or not) is asked with the same prompt, and a flip is judged on the
*target's own* clean-correct set, so a source image counts only where the target answered that question right.
A target new to the run also gets its clean pass and the rendered-text attacks directly (their edited images
depend on no model); the pixel attacks it did not take are marked not run. The diagonal (a model shown its own
images) re-asks what the audit verified and must give the white-box ASR.

With surrogates (:class:`~mmaudit.pathways.pixel.surrogate.SurrogateEnsemble`), each ensemble crafts one image
per question of the targets' clean-correct sets (``crafted`` records, resumable like every unit), then those
images are shown to every target like any source's. ``leave-one-out`` gives each of the run's models the
ensemble of the other models' vision towers; a source never counts towards the black-box risk of a target it
was made from.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from mmaudit.audit.driver import NO_GRADIENTS, Progress, not_run, start_model, unit_runner, write_files
from mmaudit.audit.executors import Executor
from mmaudit.audit.plan import AuditPlan, Unit, chunks_of, correct_set
from mmaudit.audit.units import png_bytes
from mmaudit.data.images import load_rgb
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.judge.match import Judge
from mmaudit.models.encoders import Ensemble
from mmaudit.pathways import registry
from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble
from mmaudit.store import RunStore, key_of

NOT_ATTACKED = "a transfer target: not attacked white-box in this run"


def pixel_sources(store: RunStore, params: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    """(source fingerprint, pixel attack) -> the source's records that saved an image with the parameters asked
    for (a white-box attack's at the run's, a crafted one's at this transfer's), in sample order."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in [*store.records("attack"), *store.records("crafted")]:
        if registry.is_pixel(r["attack"]) and r.get("image") and r["params"] in params.get(r["attack"], []):
            out[(r["fingerprint"], r["attack"])].append(r)
    return {k: sorted(v, key=lambda r: r["sample"]) for k, v in sorted(out.items())}


@dataclass(frozen=True)
class Surrogates:
    """How `audit transfer --surrogates` crafts: each ensemble with the fingerprints of the targets it is made for
    (None: every target), at these settings."""

    ensembles: list[tuple[Ensemble, tuple[str, ...] | None]]
    eps: float = 16 / 255
    steps: int = 300
    alpha: float = 1 / 255
    crop_scale: tuple[float, float] = (1.0, 1.0)
    target: str = "typo_evid"  # the rendered-text attack whose image is each question's target
    loss: str = "away"
    features: str = "tokens"

    def attack(self, ensemble: Ensemble, plan: AuditPlan) -> SurrogateEnsemble:
        edit = registry.spec(self.target).cls.from_config(plan.cfg, plan.judge or Judge())
        return SurrogateEnsemble(eps=self.eps, steps=self.steps, alpha=self.alpha, seed=plan.cfg.seed,
                                 crop_scale=self.crop_scale, ensemble=ensemble, target=edit, loss=self.loss,
                                 features=self.features)


def craft(plan: AuditPlan, store: RunStore, out: Path, surrogates: Surrogates, targets: list[str],
          progress: Progress | None = None) -> list[dict]:
    """Each ensemble's images for the clean-correct questions of the targets it is made for; returns the crafted
    parameters (what the transfer units read)."""
    made = []
    for ensemble, meant in surrogates.ensembles:
        attack = surrogates.attack(ensemble, plan)
        params = attack.params()
        made.append(params)
        wanted = {s.id for fp in (meant or targets) for s in correct_set(store, fp, plan.samples)}
        chunks = chunks_of([s for s in plan.samples if s.id in wanted], plan.cfg.batch)
        label = f"{ensemble.name} crafting"
        if progress:
            progress(label, 0, len(chunks))
        for n, chunk in enumerate(chunks, 1):
            keys = [key_of(kind="crafted", sample=sample_fingerprint(s), attack=params,
                           wrong=s.meta.get("wrong_answer")) for s in chunk]
            if not all(k in store for k in keys):
                write_crafted(store, out, ensemble, attack, chunk, keys, params)
            if progress:
                progress(label, n, len(chunks))
    return made


def write_crafted(store: RunStore, out: Path, ensemble: Ensemble, attack: SurrogateEnsemble, chunk: list[Sample],
                  keys: list[str], params: dict) -> None:
    res = attack.craft(chunk)
    paths = [f"adv/{attack.name}/{key}.png" for key in keys]
    write_files(out, {p: png_bytes(adv, p) for p, adv in zip(paths, res.adv_uint8)})
    store.put_many({"kind": "crafted", "key": k, "model": ensemble.name, "fingerprint": ensemble.fingerprint,
                    "members": ensemble.fingerprints, "attack": attack.name, "params": params, "sample": s.id,
                    "image": p, "linf": li, "passes": ps}
                   for s, k, p, li, ps in zip(chunk, keys, paths, res.linf, res.passes))


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
        source = {"model": recs[0]["model"], "fingerprint": fp, "attack": attack, "params": recs[0]["params"],
                  "members": recs[0].get("members", [fp])}
        for chunk in chunks_of([plan.by_id[i] for i in sorted(by_sample)], plan.cfg.batch):
            paths = [by_sample[s.id]["image"] for s in chunk]
            keys = tuple(transfer_key(target, source | {"image": p}, sample_fingerprint(s))
                         for s, p in zip(chunk, paths))
            out.append((Unit("transfer", tuple(s.id for s in chunk), keys, attack), source, paths))
    return out


def drive_transfer(executor: Executor, plan: AuditPlan, out: Path, progress: Progress | None = None,
                   surrogates: Surrogates | None = None) -> RunStore:
    """Every target's clean pass; the surrogates' images (if asked for); then per target its rendered-text attacks
    where the run lacks them and every source's pixel-attack images. Resumable like the audit: a unit is done when
    its keys are in the store."""
    out = Path(out)
    store = RunStore(out / "results.jsonl")
    run = unit_runner(executor, store, out, progress)
    try:
        metas = executor.metas()
        fps = [start_model(run, store, plan, k, meta)[0] for k, meta in enumerate(metas)]
        asked = {a: [p] for a, p in plan.params.items()}
        if surrogates:
            asked["surrogate"] = craft(plan, store, out, surrogates, fps, progress)
        sources = pixel_sources(store, asked)  # the run's images and the crafted ones; new targets add none
        for k, (meta, fp) in enumerate(zip(metas, fps)):
            name = meta["model"]
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
