"""What one PGD step keeps for its backward and what it computes, at the full Qwen2.5-VL-3B / 7B shapes, per
activation-checkpointing mode, on any machine (no GPU needed; both quantities do not depend on the device).

- Kept bytes: every tensor autograd saves during End-PGD's objective forward (``saved_tensors_hooks``), plus the
  inputs each checkpointed block holds for its recomputation, counted once per storage, weights excluded. This is
  the memory that grows with the batch; a GPU's peak adds short-lived workspace on top.
- FLOPs: ``torch.utils.flop_counter`` over forward, input-only backward and any recomputation (CPU SDPA kernels
  are given the library's own attention formulas, which it lacks for them), so "vs none" is the recomputation's
  share in matrix products: what a compute-bound GPU pays for the memory saved.

Full depth would need 8-15 GB and minutes per step on a CPU, so the model is built at full width with a few
blocks, and each block kind is measured by difference (layers of one kind are identical): one step with the base
blocks (one windowed and one full-attention vision block, one decoder layer), then one with an extra block of
each kind. The full model is the base plus the increments times its block counts (3B and 7B: 28 windowed and 4
full vision blocks; 36 or 28 decoder layers). bfloat16, as the attack runs on a GPU (an RMSNorm keeps a float32
copy of its input).

Run: python benchmarks/activation_memory.py [--model 3b,7b] [--sizes 448x448,896x672]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).parent))
from gpu_pgd import QUESTION, SHAPES, VOCAB, build  # noqa: E402
from mmaudit.data.sample import Sample  # noqa: E402
from mmaudit.pathways.pixel import EndPGD  # noqa: E402

MODES = ("none", "mlp", "mlp+norms", "layers")
aten = torch.ops.aten
CPU_SDPA = {  # the CPU flash kernels (arguments arrive as shapes), counted like their CUDA siblings
    aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, **kw: flop_counter.sdpa_flop_count(q, k, v),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda g, q, k, v, *a, **kw:
        flop_counter.sdpa_backward_flop_count(g, q, k, v),
}


def step(vlm, sample: Sample) -> tuple[int, int]:
    """(bytes kept for the backward, FLOPs) of End-PGD's objective step on one sample."""
    params = {p.untyped_storage().data_ptr() for p in vlm.model.parameters()}
    kept: dict[int, int] = {}

    def count(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    def held(module, args, kwargs):  # what a checkpointed block keeps to recompute itself
        for value in [*args, *kwargs.values()]:
            for t in value if isinstance(value, tuple) else (value,):
                if isinstance(t, torch.Tensor):
                    count(t)

    hooks = [m.register_forward_pre_hook(held, with_kwargs=True) for m in vlm.checkpointed_modules()] \
        if vlm.activation_checkpointing != "none" else []
    x = torch.from_numpy(sample.image).permute(2, 0, 1).float().div(255)
    delta = torch.zeros_like(x).requires_grad_(True)
    flops = FlopCounterMode(display=False, custom_mapping=CPU_SDPA)
    try:
        with flops:
            with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
                loss, _ = EndPGD(steps=1, early_stop=False).objective(vlm, [(x + delta).clamp(0, 1)], [sample], {})
            torch.autograd.grad(loss.sum(), delta)
    finally:
        for h in hooks:
            h.remove()
    return sum(kept.values()), flops.get_total_flops()


def arrange(vlm, stock: tuple[list, list], vision: list[int], full: list[int], decoder: list[int]) -> None:
    """Run only the chosen vision blocks (``full``: which of them attend over the whole image) and decoder layers
    of ``stock`` (all blocks built)."""
    visual, text = vlm.model.model.visual, vlm.model.model.language_model
    visual.blocks = torch.nn.ModuleList([stock[0][i] for i in vision])
    visual.fullatt_block_indexes = full
    text.layers = torch.nn.ModuleList([stock[1][i] for i in decoder])
    text.config.num_hidden_layers = len(decoder)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="3b,7b")
    ap.add_argument("--sizes", default="448x448,896x672", help="WxH image sizes")
    args = ap.parse_args()
    torch.manual_seed(0)
    print("| model | image | checkpoint | kept GiB / sample | TFLOP / sample-step | vs none |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.model.split(","):
        shapes = {k: dict(v) for k, v in SHAPES[name].items()}
        full = len(shapes["vision"]["fullatt_block_indexes"])
        blocks = dict(windowed=shapes["vision"]["depth"] - full, full=full, decoder=shapes["text"]["num_hidden_layers"])
        shapes["vision"].update(depth=3, fullatt_block_indexes=[1])
        shapes["text"].update(num_hidden_layers=2)
        vlm = build(shapes, "cpu", torch.bfloat16, VOCAB)
        stock = list(vlm.model.model.visual.blocks), list(vlm.model.model.language_model.layers)
        for size in args.sizes.split(","):
            w, h = (int(v) for v in size.split("x"))
            image = (np.random.default_rng(0).random((h, w, 3)) * 255).astype(np.uint8)
            sample = Sample("s0", image, QUESTION, "42", "number", "chartqa")
            plain = None
            for mode in MODES:
                vlm.activation_checkpointing = mode
                runs = {}
                for kind, layout in {"base": ([0, 1], [1], [0]), "windowed": ([0, 1, 2], [2], [0]),
                                     "full": ([0, 1, 2], [1, 2], [0]), "decoder": ([0, 1], [1], [0, 1])}.items():
                    arrange(vlm, stock, *layout)
                    runs[kind] = np.array(step(vlm, sample), dtype=np.float64)
                total = runs["base"] + sum((blocks[k] - 1) * (runs[k] - runs["base"]) for k in blocks)
                plain = total if mode == "none" else plain
                print(f"| Qwen2.5-VL-{name.upper()} | {w} x {h} | {mode} | {total[0] / 2**30:.2f} | "
                      f"{total[1] / 1e12:.2f} | {total[1] / plain[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
