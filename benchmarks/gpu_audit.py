"""The paper's protocol, projected: a full FusionAudit run on a full-size random-weight checkpoint written to disk,
timed per attack, and the GPU-hours of 1,500 questions with all five attacks at the fixed 40-step budget.

The checkpoint (Qwen2.5-VL-3B or 7B shapes, the real vocabulary, random weights) is saved with its tokenizer,
chat template and processor, and audited through the same code as `mmaudit audit` (the plan, the local
executor, the driver, the store) with ``--reference self`` (every answered question is in C, so a random model
exercises every attack), ``--paper-protocol`` (no early stop: the worst case, independent of how fast a model
flips) and ``--batch auto``. Wall time per sample is read per stage from the driver's progress events; the
projection scales each pixel attack to 40 steps and every stage to 1,500 questions. After the first size,
`mmaudit audit` is run once as a command on the same checkpoint, to show the command end to end. On a machine
without CUDA the shapes, sizes and step counts are reduced (say so in what you report).

Run: python benchmarks/gpu_audit.py [--model 3b] [--sizes 448x448,896x672] [--questions 16] [--steps 4] [--no-cli]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_pgd import SHAPES, VOCAB, build  # noqa: E402
from mmaudit.audit import AuditConfig, AuditPlan, LocalExecutor, drive  # noqa: E402
from mmaudit.data.sources import load_data  # noqa: E402
from mmaudit.models.load import Placement, load_model  # noqa: E402

ATTACKS = ("vis_pgd", "end_pgd", "mantis", "typo_evid", "nat_evid")
PIXEL = ("vis_pgd", "end_pgd", "mantis")
PAPER_QUESTIONS, PAPER_STEPS = 1500, 40


def write_checkpoint(shapes: dict, folder: Path, device: str) -> Path:
    vlm = build(shapes, device, torch.bfloat16 if device == "cuda" else torch.float32, VOCAB)
    vlm.model.save_pretrained(folder)
    vlm.tokenizer.save_pretrained(folder)
    vlm.image_processor.save_pretrained(folder)
    return folder


def write_data(folder: Path, n: int, w: int, h: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
        rows.append({"id": f"q{i}", "image": f"{i}.png", "question": "What is the value of the largest bar?",
                     "answer": "42", "answer_type": "number", "family": "chartqa",
                     "instruction": "Answer the question using a single word or phrase."})
    path = folder / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def timed_audit(vlm, data: Path, out: Path, steps: int) -> dict[str, tuple[float, int]]:
    """Seconds and unit count per stage ("clean", each attack), from the driver's progress events."""
    cfg = AuditConfig(attacks=list(ATTACKS), steps=steps, early_stop=False, recovery=0, ocr_limit=0,
                      reference="self", batch=Placement().batch("auto"))
    loaded = load_data(str(data))
    plan = AuditPlan.build(loaded.samples, cfg)
    spans: dict[str, list[float]] = {}

    def progress(label: str, done: int, total: int) -> None:
        stage = label.split(" ", 1)[1]
        spans.setdefault(stage, [time.perf_counter(), 0.0])[1] = time.perf_counter()

    store = drive(LocalExecutor([vlm], plan), plan, out, progress=progress)
    attacked = {a: sum(1 for r in store.records("attack") if r["attack"] == a) for a in ATTACKS}
    out_rows = {"clean": (spans["clean"][1] - spans["clean"][0], len(plan.samples))}
    for a in ATTACKS:
        out_rows[a] = (spans[a][1] - spans[a][0], attacked[a])
    return out_rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="3b", choices=("3b", "7b"))
    ap.add_argument("--sizes", default=None, help="WxH sizes (default 448x448,896x672 on a GPU, 224x168 on CPU)")
    ap.add_argument("--questions", type=int, default=None, help="questions timed (default 16 on a GPU, 2 on CPU)")
    ap.add_argument("--steps", type=int, default=None, help="PGD steps timed (default 4 on a GPU, 2 on CPU)")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True,
                    help="also run `mmaudit audit` once as a command, on the first size")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = SHAPES[args.model] if device == "cuda" else SHAPES["reduced"]
    sizes = args.sizes or ("448x448,896x672" if device == "cuda" else "224x168")
    n = args.questions or (16 if device == "cuda" else 2)
    steps = args.steps or (4 if device == "cuda" else 2)
    label = f"Qwen2.5-VL-{args.model.upper()} shapes" if device == "cuda" else "reduced shapes"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"{name}, {label}, random weights, vocabulary {VOCAB:,}; {n} questions, {steps} PGD steps timed, "
          f"--reference self --paper-protocol --batch auto")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = write_checkpoint(shapes, tmp / "model", device)
        t0 = time.perf_counter()
        placement = Placement()  # as the command places it: --device auto --dtype auto --activation-checkpointing auto
        vlm = load_model(f"{model_dir}@L2", placement)
        where = placement.describe()
        print(f"checkpoint written, loaded back in {time.perf_counter() - t0:.1f} s: {where['resolved_device']} "
              f"({where['gpu'] or 'CPU'}), {where['resolved_dtype']}, checkpointing {vlm.activation_checkpointing}, "
              f"batch {placement.batch('auto')}")
        for i, size in enumerate(sizes.split(",")):
            w, h = (int(v) for v in size.split("x"))
            data = write_data(tmp / f"data-{size}", n, w, h)
            rows = timed_audit(vlm, data, tmp / f"run-{size}", steps)
            print(f"\n{w} x {h}:\n| stage | samples | wall (s) | s / sample | s / sample-step | projected hours "
                  f"(1,500 questions, 40 steps) |\n| --- | --- | --- | --- | --- | --- |")
            hours = 0.0
            for stage, (seconds, count) in rows.items():
                per = seconds / max(count, 1)
                scaled = per * (PAPER_STEPS / steps if stage in PIXEL else 1) * PAPER_QUESTIONS / 3600
                hours += scaled
                step = f"{per / steps:.3f}" if stage in PIXEL else ""
                print(f"| {stage} | {count} | {seconds:.1f} | {per:.2f} | {step} | {scaled:.2f} |")
            print(f"| total | | | | | **{hours:.2f} {'GPU-' if device == 'cuda' else 'CPU '}hours** |")
            if i == 0 and args.cli:  # the command once, on the first (smallest) size, before the larger sizes
                run_cli(model_dir, data, tmp / "cli", steps, f"{size}, {n} questions")


def run_cli(model_dir: Path, data: Path, out: Path, steps: int, what: str) -> None:
    """`mmaudit audit` as a user types it, on the same checkpoint: the command end to end."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "mmaudit.cli", "audit", "--model", f"{model_dir}@L2", "--data", str(data),
           "--reference", "self", "--paper-protocol", "--steps", str(steps), "--n-boot", "200",
           "--ocr-limit", "0", "--recovery", "0", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    status = "ok" if res.returncode == 0 else f"failed ({res.returncode}): {res.stderr[-500:]}"
    print(f"\n`mmaudit audit` end to end on the same checkpoint ({what}): {time.perf_counter() - t0:.1f} s, {status}")


if __name__ == "__main__":
    main()
