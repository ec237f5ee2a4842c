"""Zoo inference throughput (questions/s at batch 1 and 32) and pixel forward+backward time, per level.

Run: .venv/bin/python benchmarks/zoo_throughput.py [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from mmaudit.data.synthetic import synthetic_set
from mmaudit.models.vlm import pixels
from mmaudit.models.zoo.adapter import load_zoo


def timed(fn, repeat: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    samples = synthetic_set(8, seed=1)[:32]
    images = pixels([s.image for s in samples])
    prompts = [s.question for s in samples]
    answers = [s.answer for s in samples]
    print(f"torch {torch.__version__}, {args.threads} threads")
    print(f"{'model':10} {'q/s b=1':>9} {'q/s b=32':>9} {'fwd+bwd b=1 ms':>15} {'fwd+bwd b=32 ms':>16}")
    for level in ("L1", "L2", "L3"):
        vlm = load_zoo(level)
        row = [level]
        for b in (1, 32):
            t = timed(lambda b=b, vlm=vlm: vlm.generate(images[:b], prompts[:b]), 10 if b == 1 else 3)
            row.append(f"{b / t:9.1f}")

        def fwd_bwd(b, vlm=vlm):
            x = images[:b].clone().requires_grad_(True)
            loss = vlm.score(x, prompts[:b], answers[:b]).sequence_logprob().sum()
            torch.autograd.grad(loss, x)

        for b in (1, 32):
            row.append(f"{1000 * timed(lambda b=b: fwd_bwd(b), 10 if b == 1 else 3):15.1f}")
        print(f"zoo-{row[0]:6} {row[1]} {row[2]} {row[3]} {row[4]}")


if __name__ == "__main__":
    main()
