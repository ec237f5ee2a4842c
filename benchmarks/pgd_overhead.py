"""Pixel-pathway costs, measured side by side in one run on the zoo.

(a) one PGD step / one bare forward+backward on the same batch (target <= 1.15);
(b) model passes per clean-correct sample and R+, early stopping vs the paper's
    fixed 40-step protocol (target: >= 3x fewer passes, R+ within 1 point), for
    per-sample early stopping alone and with the union schedule (AutoAttack-style:
    a sample flipped by an earlier attack is not attacked again);
(c) attack throughput (samples/s) at batch 1 vs batch 16.

Run: .venv/bin/python benchmarks/pgd_overhead.py [--n 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from mmaudit.audit import AuditConfig, run_audit
from mmaudit.data.synthetic import FAMILIES, synthetic_set
from mmaudit.models.vlm import pixels
from mmaudit.models.zoo.adapter import load_zoo
from mmaudit.pathways.pixel import MANTIS, EndPGD
from mmaudit.report import summarise


def timed(fn, repeat: int = 5) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def step_overhead(vlm, samples) -> None:
    print("(a) PGD step vs bare forward+backward, batch", len(samples))
    x = pixels([s.image for s in samples])
    prompts, answers = [s.question for s in samples], [s.answer for s in samples]

    def bare():
        xi = x.clone().requires_grad_(True)
        loss = vlm.score(xi, prompts, answers).sequence_logprob().sum()
        torch.autograd.grad(loss, xi)

    for atk in (EndPGD(steps=1, early_stop=False), MANTIS(steps=1, early_stop=False)):
        ctx = atk.prepare(vlm, x, samples)

        def step(atk=atk, ctx=ctx):
            d = torch.zeros_like(x).requires_grad_(True)
            loss, _ = atk.objective(vlm, (x + d).clamp(0, 1), samples, ctx)
            (g,) = torch.autograd.grad(loss.sum(), d)
            with torch.no_grad():
                d = (d + atk.step_size * g.sign()).clamp(-atk.eps, atk.eps)
                _ = (x + d).clamp(0, 1) - x

        t_bare, t_step = timed(bare), timed(step)
        print(f"    {atk.name:8} step {1000 * t_step:7.1f} ms  bare {1000 * t_bare:7.1f} ms  "
              f"ratio {t_step / t_bare:.3f}")


def early_stop_vs_paper(n: int) -> None:
    print(f"(b) early stopping vs fixed 40-step protocol, zoo L1/L2/L3, {n} questions per family")
    samples = synthetic_set(n, seed=10_000, families=FAMILIES)
    models = [load_zoo(level) for level in ("L1", "L2", "L3")]
    out = {}
    for label, early, schedule in (("early-stop", True, "full"), ("early+union", True, "union"),
                                   ("paper", False, "full")):
        cfg = AuditConfig(attacks=["vis_pgd", "end_pgd", "mantis"], early_stop=early, batch=16, schedule=schedule,
                          recovery=0, ocr_limit=0)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            store = run_audit(models, samples, Path(tmp), cfg)
            secs = time.perf_counter() - t0
            summary = summarise(store, n_boot=200)
        recs = list(store.records("attack"))
        n_c = sum(m["n_correct"] for m in summary["models"])
        passes = sum(r["passes"] for r in recs) / max(1, n_c)
        r_plus = {m["model"]: 100 * m["r_plus"] for m in summary["models"]}
        out[label] = (passes, r_plus)
        print(f"    {label:11} passes per clean-correct sample (all attacks) {passes:6.1f}  wall {secs:6.1f} s  "
              + "  ".join(f"R+ {k} {v:.1f}" for k, v in r_plus.items()))
    for label in ("early-stop", "early+union"):
        ratio = out["paper"][0] / out[label][0]
        worst = max(abs(out["paper"][1][k] - out[label][1][k]) for k in out["paper"][1])
        print(f"    passes ratio paper/{label} {ratio:.2f}x, largest R+ difference {worst:.1f} points")


def batch_throughput(vlm, samples) -> None:
    print("(c) End-PGD throughput, 10 fixed steps")
    for b in (1, 16):
        atk = EndPGD(steps=10, early_stop=False)
        t0 = time.perf_counter()
        for i in range(0, len(samples), b):
            atk(vlm, samples[i : i + b])
        secs = time.perf_counter() - t0
        print(f"    batch {b:2}: {len(samples) / secs:6.2f} samples/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16, help="questions per family for (b)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vlm = load_zoo("L2")
    samples = synthetic_set(6, seed=10_000, families=FAMILIES)[:16]
    step_overhead(vlm, samples)
    early_stop_vs_paper(args.n)
    batch_throughput(vlm, samples)


if __name__ == "__main__":
    main()
