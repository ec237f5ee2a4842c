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

from dataclasses import dataclass
from pathlib import Path

from mmaudit.audit.driver import NO_GRADIENTS, Progress, not_run, run_shown, start_model, unit_runner, write_files
from mmaudit.audit.executors import Executor
from mmaudit.audit.plan import AuditPlan, chunks_of, correct_set, pixel_sources, transfer_units
from mmaudit.audit.units import png_bytes
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.judge.match import Judge
from mmaudit.models.encoders import Ensemble
from mmaudit.pathways import registry
from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble
from mmaudit.store import RunStore, key_of

NOT_ATTACKED = "a transfer target: not attacked white-box in this run"


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
    channel: str | None = None  # crafted through the targets' pipeline (its stand-ins' gradients)
    defence: str | None = None

    def attack(self, ensemble: Ensemble, plan: AuditPlan) -> SurrogateEnsemble:
        edit = registry.spec(self.target).cls.from_config(plan.cfg, plan.judge or Judge())
        return SurrogateEnsemble(eps=self.eps, steps=self.steps, alpha=self.alpha, seed=plan.cfg.seed,
                                 crop_scale=self.crop_scale, ensemble=ensemble, target=edit, loss=self.loss,
                                 features=self.features, channel=self.channel, defence=self.defence)


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
            run_shown(run, k, transfer_units(plan, fp, store, sources, meta.get("bare_fingerprint")), out,
                      f"{name} transfer")
    finally:
        executor.close()
    return store
