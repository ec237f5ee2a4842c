"""How tight is R+? Attack success against the model passes it costs, and transfer that is made to transfer.

(a) White-box, on the zoo (default: L1, 32 questions per task family, eps 8/255): the ASR (% of the clean-correct
    set C) of End-PGD, Vis-PGD and MANTIS under plain PGD (step eps/8) at 10, 20, 40, 100, 200 and 400 steps and
    under APGD at 10, 20, 40 and 100 steps, one restart and three (the strong preset), with the mean model passes
    per sample of C each spent (gradient steps, early-stop checks and the final check; early stopping on, as the
    audit runs). Every setting is a separate run with the audit's own attack classes and per-sample seeds.
(b) Transfer on the zoo (every level): today's transfer (a default audit at eps 8/255, its images shown to the
    other levels) as the baseline; then at eps 16/255 the audit's own pixel attacks (End-PGD, MANTIS, Vis-PGD) are
    run white-box on each level, their images shown to the other two ("output-loss" transfer, what `audit
    transfer` measured before), then each level is attacked by the leave-one-out surrogate ensemble of the other
    two levels' vision towers (300 signed steps of 1/255), through `mmaudit audit transfer --surrogates
    leave-one-out`, once per surrogate setting asked for (default: the tool's default, token features pushed away
    from the clean image's, and M-Attack's recipe, local crops matched to the Typo-Evid image's pooled
    embedding). Printed per target: today's best off-diagonal cell and the best output-loss cell against the
    surrogate cell (and their ratios to today's and to the 16/255 output-loss cell), and the black-box R+ today,
    with output-loss images, with surrogate images, with both, with 95% CIs, all on the same questions.
(c) The strong preset as AutoAttack composes it (`--ensemble`), per level: End-PGD as `--strength strong` builds it
    (the cross-entropy, DLR, targeted margin, then Square; every gradient start after two ODI steps) at each of
    `--ensemble-seeds`, and at seed 0 without ODI (what output-diversified starts add), each with what every
    member flipped of what reached it and its passes; End-PGD's references, APGD 100 steps x 3 restarts with the
    cross-entropy loss and with the targeted margin loss, each at seeds 0, 1 and 2 (the first, cross-entropy at
    seed 0, is the strong preset before the ensemble); whether each strong run flips every question a reference
    run flips, and its passes against the old preset's; and Square alone on all of C (its own ASR).
    `--quick-references` asks the references (but the old preset) only about what a strong run left.

Run: .venv/bin/python benchmarks/attack_strength.py [--levels L1] [--n 32] [--skip-transfer]
     [--surrogate-settings default,m-attack] [--ensemble [--ensemble-seeds 0,1,2] [--quick-references]]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

from mmaudit.audit import AuditConfig
from mmaudit.audit.plan import AuditPlan, correct_set
from mmaudit.audit.units import clean_unit
from mmaudit.data.synthetic import FAMILIES, synthetic_set
from mmaudit.judge.match import Judge
from mmaudit.models.zoo.adapter import load_zoo
from mmaudit.pathways import registry
from mmaudit.store import RunStore

ATTACKS = ("end_pgd", "vis_pgd", "mantis")
PGD_BUDGETS = (10, 20, 40, 100, 200, 400)
APGD_SETTINGS = ((10, 1), (20, 1), (40, 1), (100, 1), (100, 3))


def clean_correct(vlm, n: int, tmp: Path):
    """The zoo model's clean-correct questions (wrong answers fixed as an audit's plan fixes them)."""
    plan = AuditPlan.build(synthetic_set(n, seed=10_000, families=FAMILIES), AuditConfig(batch=32))
    store = RunStore(tmp / f"{vlm.name}.jsonl")
    for unit in plan.clean_units(vlm.fingerprint):
        store.put_many(clean_unit(vlm, [plan.by_id[i] for i in unit.ids], list(unit.keys), Judge()).records)
    return correct_set(store, vlm.fingerprint, plan.samples)


def run_setting(vlm, samples, attack: str, optimiser: str, steps: int, restarts: int, batch: int = 32) -> dict:
    cls = registry.spec(attack).cls
    flipped, passes, t0 = 0, 0, time.perf_counter()
    for i in range(0, len(samples), batch):
        res = cls(eps=8 / 255, steps=steps, optimiser=optimiser, restarts=restarts)(vlm, samples[i : i + batch])
        flipped += sum(res.flipped)
        passes += sum(res.passes)
    return {"attack": attack, "optimiser": optimiser, "steps": steps, "restarts": restarts,
            "asr": 100 * flipped / len(samples), "passes": passes / len(samples),
            "seconds": time.perf_counter() - t0}


def white_box(levels: list[str], n: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in levels:
            vlm = load_zoo(level)
            samples = clean_correct(vlm, n, Path(tmp))
            print(f"\n(a) zoo {level}: |C| = {len(samples)} of {3 * n}, eps 8/255, early stopping on")
            print("| attack | optimiser | steps | restarts | ASR % of C | mean passes / sample | wall s |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for attack in ATTACKS:
                settings = [("pgd", s, 1) for s in PGD_BUDGETS] + [("apgd", s, r) for s, r in APGD_SETTINGS]
                for optimiser, steps, restarts in settings:
                    row = run_setting(vlm, samples, attack, optimiser, steps, restarts) | {"level": level,
                                                                                           "n_correct": len(samples)}
                    rows.append(row)
                    print(f"| {registry.display(attack)} | {optimiser.upper()} | {steps} | {restarts} | "
                          f"{row['asr']:.1f} | {row['passes']:.1f} | {row['seconds']:.0f} |", flush=True)
    return rows


def run_attack(vlm, samples, atk, batch: int = 32) -> dict:
    """One attack over C in batches: the set it flipped, mean passes per question of C, per-member flips and
    passes (an ensemble's), wall time."""
    flipped, passes, members, t0 = set(), 0, {}, time.perf_counter()
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        res = atk(vlm, chunk)
        flipped |= {s.id for s, f in zip(chunk, res.flipped) if f}
        passes += sum(res.passes)
        for f, kept, mp in zip(res.flipped, res.member, res.member_passes):
            for m, p in mp.items():
                row = members.setdefault(m, {"reached": 0, "flipped": 0, "passes": 0})
                row["reached"] += 1
                row["passes"] += p
                row["flipped"] += bool(f) and m == kept
    return {"flipped": flipped, "passes": passes / len(samples), "members": members,
            "seconds": time.perf_counter() - t0}


def strong_attack(seed: int, odi: int | None = None):
    """End-PGD as `--strength strong` builds it at eps 8/255 (its members and ODI starts), at ensemble seed ``seed``;
    ``odi`` overrides the preset's ODI steps (0: the ensemble with plain random starts)."""
    from mmaudit.audit.config import make_attack
    from mmaudit.cli.options import AuditOptions

    atk = make_attack("end_pgd", AuditOptions(strength="strong", eps="8/255", seed=seed).audit_config())
    return atk if odi is None else dataclasses.replace(atk, odi=odi)


def ensemble(levels: list[str], n: int, seeds: tuple[int, ...] = (0, 1, 2), ensemble_seeds: tuple[int, ...] = (0,),
             quick: bool = False) -> list[dict]:
    from mmaudit.pathways.pixel import EndPGD

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for level in levels:
            vlm = load_zoo(level)
            samples = clean_correct(vlm, n, Path(tmp))
            k = len(samples)
            print(f"\n(c) zoo {level}: |C| = {k}, eps 8/255, End-PGD; ASR in % of C, passes per question of C")
            print("| run | ASR % | passes | wall s |")
            print("| --- | --- | --- | --- |")
            runs = {f"strong, seed {es}": run_attack(vlm, samples, strong_attack(es)) for es in ensemble_seeds}
            runs["strong without ODI, seed 0"] = run_attack(vlm, samples, strong_attack(0, odi=0))
            # quick: a reference run asked only about what some strong run left gives exactly what it gives those
            # questions on all of C (per-sample seeds: a sample's result never depends on its batch-mates)
            left = [s for s in samples if any(s.id not in r["flipped"] for r in runs.values())]
            refs = {}
            for loss in ("ce", "margin"):
                for seed in seeds:
                    before = (loss, seed) == ("ce", 0)  # the strong preset before the ensemble: all of C always
                    r = run_attack(vlm, samples if before or not quick else left,
                                   EndPGD(eps=8 / 255, steps=100, optimiser="apgd", restarts=3, loss=loss, seed=seed))
                    refs[(loss, seed)] = r
                    if before or not quick:
                        print(f"| APGD-{loss.upper()} 100 x 3, seed {seed} | {100 * len(r['flipped']) / k:.1f} | "
                              f"{r['passes']:.1f} | {r['seconds']:.0f} |", flush=True)
            old = refs[("ce", 0)]
            for name, r in runs.items():
                print(f"| {name} | {100 * len(r['flipped']) / k:.1f} | {r['passes']:.1f} "
                      f"({r['passes'] / old['passes']:.2f}x the old preset) | {r['seconds']:.0f} |")
            if not quick:
                both = refs[("ce", 0)]["flipped"] | refs[("margin", 0)]["flipped"]
                print(f"| union of APGD-CE and APGD-MARGIN 100 x 3, seed 0 | {100 * len(both) / k:.1f} | "
                      f"{refs[('ce', 0)]['passes'] + refs[('margin', 0)]['passes']:.1f} | — |")
                square = run_attack(vlm, samples, EndPGD(eps=8 / 255, members=("square:400",)))
                print(f"| Square alone, 400 queries | {100 * len(square['flipped']) / k:.1f} | "
                      f"{square['passes']:.1f} | {square['seconds']:.0f} |")
            union = set().union(*(r["flipped"] for r in refs.values()))
            row = {"level": level, "n_correct": k, "old_passes": old["passes"], "reference_flips": union, "runs": {}}
            for name, r in runs.items():
                print(f"\n{name} ({' → '.join(EndPGD.STRONG)}), member by member:")
                print("| member | questions reached | flipped | mean passes per question of C |")
                print("| --- | --- | --- | --- |")
                for m, mr in r["members"].items():
                    print(f"| {m} | {mr['reached']} | {mr['flipped']} | {mr['passes'] / k:.1f} |")
                missed = sorted(union - r["flipped"])
                asked = (f"the references asked about the {len(left)} questions a strong run left" if quick else
                         f"the six reference runs flip {len(union)} questions, {name} {len(union & r['flipped'])}")
                print(f"{asked}; flipped by a reference run but not by {name}: {missed or 'none'}; passes "
                      f"{r['passes']:.1f} against the old preset's {old['passes']:.1f} "
                      f"({r['passes'] / old['passes']:.2f}x)")
                row["runs"][name] = r | {"missed": missed}
            rows.append(row)
    return rows


# The surrogate settings part (b) can compare: the tool's default, M-Attack's recipe as the issue gave it (either
# target image), and the default with one choice changed (pooled embeddings, contrast loss, M-Attack's crops).
SURROGATE_SETTINGS = {
    "default": {},
    "m-attack": {"surrogate_loss": "match", "surrogate_features": "pooled", "crop_scale": "0.5,0.9"},
    "m-attack-nat": {"surrogate_loss": "match", "surrogate_features": "pooled", "crop_scale": "0.5,0.9",
                     "surrogate_target": "nat_evid"},
    "pooled": {"surrogate_features": "pooled"},
    "contrast": {"surrogate_loss": "contrast"},
    "crops": {"crop_scale": "0.5,0.9"},
}


def transfer(n: int, settings: list[str]) -> dict:
    from mmaudit.cli.audit import run_audit_command, run_transfer_command
    from mmaudit.cli.options import TransferOptions

    out = {}
    attacks = "vis_pgd,end_pgd,mantis,typo_evid"
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        today = Path(tmp) / "today"  # what `audit transfer` gave before: the default audit's images, eps 8/255
        run_audit_command(out=today, data=f"synthetic:{n}", attacks=attacks, recovery=0, ocr_limit=0, n_boot=2000)
        out["today"] = base = run_transfer_command(today, options=TransferOptions(n_boot=2000))["transfer"]
        run = Path(tmp) / "run"
        run_audit_command(out=run, data=f"synthetic:{n}", eps="16/255", attacks=attacks, recovery=0, ocr_limit=0,
                          n_boot=2000)
        print(f"\n(b) transfer on the zoo, {n} questions per family (two white-box audits and today's transfer "
              f"{time.perf_counter() - t0:.0f} s)")
        for name in settings:
            t1 = time.perf_counter()
            opts = TransferOptions(surrogates="leave-one-out", n_boot=2000, **SURROGATE_SETTINGS[name])
            out[name] = t = run_transfer_command(run, options=opts)["transfer"]
            print(f"\nleave-one-out surrogate ensembles at eps 16/255, setting {name}: loss {opts.surrogate_loss}, "
                  f"features {opts.surrogate_features}, crops {opts.crop_scale}, target image "
                  f"{registry.display(opts.surrogate_target)} ({time.perf_counter() - t1:.0f} s to craft and "
                  f"transfer)")
            transfer_table(t, base)
    return out


def ci(v) -> str:
    return "—" if not v else f"{100 * v[0]:.1f} [{100 * v[1]:.1f}, {100 * v[2]:.1f}]"


def best_off_diagonal(t: dict, target: str) -> dict:
    cells = [c for c in t["matrix"] if c["target"] == target and not c["from_target"] and c["kind"] == "output-loss"]
    return max(cells, key=lambda c: c["asr"][0])


def transfer_table(t: dict, today: dict) -> None:
    print("| target | today's best transfer, eps 8/255 (source · attack) | best output-loss transfer, eps 16/255 | "
          "surrogate transfer, eps 16/255 (leave-one-out) | ratio to today | ratio to output-loss 16/255 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in t["targets"]:
        base, loss = best_off_diagonal(today, r["target"]), best_off_diagonal(t, r["target"])
        sur = [c for c in t["matrix"]
               if c["target"] == r["target"] and not c["from_target"] and c["kind"] == "surrogate"]
        best = max(sur, key=lambda c: c["asr"][0]) if sur else None

        def ratio(c, best=best):
            return f"{best['asr'][0] / c['asr'][0]:.2f}" if best and c["asr"][0] else "—"

        print(f"| {r['target']} | {ci(base['asr'])} ({base['source']} · {registry.display(base['attack'])}) | "
              f"{ci(loss['asr'])} ({loss['source']} · {registry.display(loss['attack'])}) | "
              f"{ci(best['asr']) if best else '—'} | {ratio(base)} | {ratio(loss)} |")
    print("\n| target | |C| | text attacks alone | black-box R+ today (eps 8/255) | black-box R+, output-loss "
          "images | black-box R+, surrogate images | black-box R+, both | white-box R+ |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    before = {r["target"]: r for r in today["targets"]}
    for r in t["targets"]:
        print(f"| {r['target']} | {r['n_correct']} | {ci(r['text_direct'])} | "
              f"{ci(before[r['target']]['r_plus_black_box'])} | {ci(r['r_plus_output_loss'])} | "
              f"{ci(r['r_plus_surrogate'])} | {ci(r['r_plus_black_box'])} | {ci(r['r_plus_white_box'])} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="L1", help="zoo levels for (a), comma-separated")
    ap.add_argument("--n", type=int, default=32, help="questions per task family")
    ap.add_argument("--skip-white-box", action="store_true")
    ap.add_argument("--skip-transfer", action="store_true")
    ap.add_argument("--ensemble", action="store_true", help="run (c), the strong preset's ensemble, on --levels")
    ap.add_argument("--ensemble-seeds", default="0", help="(c): the strong preset's seeds, comma-separated")
    ap.add_argument("--quick-references", action="store_true",
                    help="(c): the reference runs (but the old preset's) only on what a strong run left, and no "
                         "Square-alone run: the coverage and passes figures, without the references' own ASRs")
    ap.add_argument("--surrogate-settings", default="default,m-attack",
                    help=f"comma-separated, of {','.join(SURROGATE_SETTINGS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write every figure here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {}
    if args.ensemble:
        out["ensemble"] = ensemble(args.levels.split(","), args.n,
                                   ensemble_seeds=tuple(int(x) for x in args.ensemble_seeds.split(",")),
                                   quick=args.quick_references)
    if not args.skip_white_box:
        out["white_box"] = white_box(args.levels.split(","), args.n)
    if not args.skip_transfer:
        out["transfer"] = transfer(args.n, args.surrogate_settings.split(","))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=sorted))  # sets as sorted lists


if __name__ == "__main__":
    main()
