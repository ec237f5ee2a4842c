"""PGD step cost on the Qwen2.5-VL-3B (or 7B) shapes with the real 151,936-token vocabulary (random weights):
time per sample and step, activation memory per sample, achieved TFLOP/s and its share of the chip's measured
matrix-multiply rate, over batch sizes, two image sizes and the activation-checkpointing modes.

Each row times End-PGD's objective step exactly as the attack runs it (the project's adapter: Pillow-exact
preprocessing, the chat template, logits only at the answer positions, SDPA), forward plus the input-only
backward. FLOPs are counted analytically from the configuration, matrix products only: the patch embedding,
every linear layer of the vision tower, merger and decoder, attention scores and values (windowed blocks over
their windows, full blocks over the image, the decoder causally), and the LM head at the answer positions; an
input-only backward costs one more forward (activation gradients, no weight gradients). Recomputation under
activation checkpointing is overhead, not counted: its cost shows as time (the "vs none" column). The
reference rate is a large matrix product in the same dtype, timed in the same run. "vs none" compares a row with
no checkpointing at the same batch; "vs best none" with the fastest batch of no checkpointing at that size
(checkpointing is there to let the batch grow past where no checkpointing runs out of memory, so that is the
fair comparison). Rows run in the order given (image size, then mode, then batch; a mode stops at its first
out-of-memory batch); with ``--budget`` no row starts after that many seconds, and the JSON is rewritten after
every row, so a run cut short keeps what it measured. On a machine without CUDA
the shapes are reduced (say so in what you report) and memory is not measured here: what a step keeps at the
full shapes, on any machine, is ``activation_memory.py``'s.

Run: python benchmarks/gpu_pgd.py [--model 3b|7b] [--sizes 448x448,896x672] [--batches 1,4,16,32,48]
       [--checkpoints none,mlp+norms,layers,mlp] [--budget SECONDS] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from mmaudit.data.sample import Sample
from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
from mmaudit.models.hf.tiny import QWEN_NAMED, SPECIALS, char_tokenizer
from mmaudit.models.hf.tiny_formats import QWEN2_VL
from mmaudit.pathways.pixel import EndPGD

VOCAB = 151_936
SHAPES = {
    "3b": dict(text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                         num_key_value_heads=2),
               vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                           fullatt_block_indexes=[7, 15, 23, 31], window_size=112)),
    "7b": dict(text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                         num_key_value_heads=4),
               vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                           fullatt_block_indexes=[7, 15, 23, 31], window_size=112)),
    "reduced": dict(text=dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2),
                    vision=dict(depth=4, hidden_size=128, intermediate_size=384, num_heads=4, out_hidden_size=256,
                                fullatt_block_indexes=[1, 3], window_size=112)),
}
QUESTION = "What is the value of the largest bar?\nAnswer the question using a single word or phrase."


def build(shapes: dict, device: str, dtype: torch.dtype, vocab: int) -> Qwen2_5_VLAdapter:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = char_tokenizer(template=QWEN2_VL, named=QWEN_NAMED, size=vocab)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    head = shapes["text"]["hidden_size"] // shapes["text"]["num_attention_heads"]
    third = head // 2 // 8
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=vocab, max_position_embeddings=32768, **shapes["text"],
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                          "mrope_section": [2 * third, 3 * third, head // 2 - 5 * third]},
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"]),
        vision_config=shapes["vision"], image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(cfg).to(dtype).eval()
    ip = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)  # the checkpoint's published budget
    return Qwen2_5_VLAdapter(model, tok, ip, name="qwen2.5-vl-shapes", level="L2")


def step_flops(vlm: Qwen2_5_VLAdapter, h: int, w: int, text_tokens: int, answer_tokens: int) -> float:
    """Analytic FLOPs of one PGD step for one sample (see the module docstring for what is counted)."""
    vc, tc = vlm.model.config.vision_config, vlm.model.config.text_config
    p, m = vlm.patch, vlm.merge
    nv = (h // p) * (w // p)
    d, f = vc.hidden_size, vc.intermediate_size
    window = (vc.window_size // p) ** 2
    full = set(vc.fullatt_block_indexes)
    block_linear = 2 * nv * (4 * d * d + 3 * d * f)
    vision_blocks = [block_linear + 4 * nv * (nv if i in full else window) * d for i in range(vc.depth)]
    vision = 2 * nv * (3 * 2 * p * p) * d + sum(vision_blocks)
    vision += 2 * (nv // m**2) * ((m * m * d) ** 2 + m * m * d * vc.out_hidden_size)
    D, F, L = tc.hidden_size, tc.intermediate_size, nv // m**2 + text_tokens
    kv = D // tc.num_attention_heads * tc.num_key_value_heads
    layer_linear = 2 * L * (D * D + 2 * D * kv + D * D + 3 * D * F)
    decoder_layers = [layer_linear + 2 * L * L * D for _ in range(tc.num_hidden_layers)]  # causal: half of 4 L^2 D
    head = 2 * answer_tokens * D * tc.vocab_size
    return 2 * (vision + sum(decoder_layers) + head)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_rate(device: str, dtype: torch.dtype) -> float:
    """TFLOP/s of a large square matrix product in ``dtype`` here (the chip's practical ceiling): the best of five
    timings, since one timing on a shared CPU may be half the rate."""
    n = 8192 if device == "cuda" else 1024
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    reps, best = (20 if device == "cuda" else 5), 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12)
    return best


def measure(vlm, atk: EndPGD, samples: list[Sample], device: str, repeat: int) -> tuple[float, float]:
    """(seconds per step for the batch, peak GiB above the weights) of End-PGD's objective step."""
    xs = [torch.from_numpy(s.image).permute(2, 0, 1).float().div(255).to(device) for s in samples]

    def step():
        d = [torch.zeros_like(x).requires_grad_(True) for x in xs]
        loss, _ = atk.objective(vlm, [(x + di).clamp(0, 1) for x, di in zip(xs, d)], samples, {})
        torch.autograd.grad(loss.sum(), d)

    step()
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        step()
    sync(device)
    seconds = (time.perf_counter() - t0) / repeat
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if device == "cuda" else float("nan")
    return seconds, peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="3b", choices=("3b", "7b"))
    ap.add_argument("--sizes", default="448x448,896x672", help="WxH image sizes")
    ap.add_argument("--batches", default=None, help="batch sizes (default: 1,4,16,32,48 on a GPU, 1,2,4 on CPU)")
    ap.add_argument("--checkpoints", default="none,mlp+norms,layers,mlp")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows to this file (after every row)")
    ap.add_argument("--budget", type=float, default=None, help="start no row after this many seconds")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shapes = SHAPES[args.model] if device == "cuda" else SHAPES["reduced"]
    vocab = VOCAB
    batches = [int(b) for b in (args.batches or ("1,4,16,32,48" if device == "cuda" else "1,2,4")).split(",")]
    vlm = build(shapes, device, dtype, vocab)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    n_params = sum(p.numel() for p in vlm.model.parameters()) / 1e9
    rate = matmul_rate(device, dtype)
    print(f"{name}, {'Qwen2.5-VL-' + args.model.upper() if device == 'cuda' else 'reduced'} shapes, vocabulary "
          f"{vocab:,} ({n_params:.2f} B parameters), {str(dtype).removeprefix('torch.')}, SDPA; measured matmul "
          f"rate {rate:.1f} TFLOP/s")
    atk = EndPGD(steps=1, early_stop=False)
    rows: list[dict] = []
    print("| image | checkpoint | batch | ms / sample-step | vs none | vs best none | GiB / sample | "
          "TFLOP / sample-step | TFLOP/s | share of matmul rate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    start = time.perf_counter()
    plain: dict[tuple, float] = {}
    for size in args.sizes.split(","):
        w, h = (int(v) for v in size.split("x"))
        rng = np.random.default_rng(0)
        for mode in args.checkpoints.split(","):
            vlm.activation_checkpointing = mode
            for b in batches:
                if args.budget is not None and time.perf_counter() - start > args.budget:
                    print(f"(budget of {args.budget:.0f} s spent: rows from {w} x {h} {mode} batch {b} on not run)")
                    return
                samples = [Sample(f"s{i}", (rng.random((h, w, 3)) * 255).astype(np.uint8), QUESTION, "42", "number",
                                  "chartqa") for i in range(b)]
                try:
                    seconds, gib = measure(vlm, atk, samples, device, args.repeat)
                except torch.OutOfMemoryError:
                    seconds = None
                if seconds is None:  # outside the handler, so the failed step's tensors are released first
                    torch.cuda.empty_cache()
                    print(f"| {w} x {h} | {mode} | {b} | out of memory | | | | | | |")
                    break
                enc = vlm.encode([torch.zeros(3, h, w)], [QUESTION], ["42"])
                text = int((enc.input_ids[0] != vlm.image_token_id).sum())
                flops = step_flops(vlm, h, w, text, len(vlm.answer_tokens("42")))
                tflops = flops * b / seconds / 1e12
                if mode == "none":
                    plain[(size, b)] = seconds
                ratio = seconds / plain[(size, b)] if (size, b) in plain else float("nan")
                best = min((t / n for (sz, n), t in plain.items() if sz == size), default=float("nan"))
                row = {"image": f"{w}x{h}", "checkpoint": mode, "batch": b, "ms_per_sample_step": 1000 * seconds / b,
                       "time_vs_none": ratio, "time_vs_best_none": seconds / b / best, "gib_per_sample": gib / b,
                       "tflop_per_sample_step": flops / 1e12, "tflops": tflops, "share": tflops / rate}
                rows.append(row)
                memory = "n/a" if gib != gib else f"{gib / b:.2f}"
                print(f"| {w} x {h} | {mode} | {b} | {row['ms_per_sample_step']:.1f} | {ratio:.2f}x | "
                      f"{row['time_vs_best_none']:.2f}x | {memory} | {row['tflop_per_sample_step']:.3f} | "
                      f"{tflops:.2f} | {100 * row['share']:.1f}% |")
                if args.json:
                    with open(args.json, "w") as fh:
                        json.dump({"device": name, "matmul_tflops": rate, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
