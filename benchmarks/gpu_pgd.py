"""PGD cost on a full-size Qwen2.5-VL-3B configuration (random weights): step vs bare forward+backward, memory.

On a GPU: the real 3B shapes in bf16. On CPU: the same architecture reduced
(``--reduced``, the default without CUDA) so it finishes in minutes. Both with
and without the downscaled noise field (the paper's memory fallback). Prints
one table; nothing is downloaded.

Run: .venv/bin/python benchmarks/gpu_pgd.py [--size 448] [--downscale 224] [--reduced]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F

from mmaudit.data.sample import Sample
from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
from mmaudit.models.hf.tiny import SPECIALS, char_tokenizer
from mmaudit.pathways.pixel import EndPGD

FULL = dict(text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                      num_key_value_heads=2),
            vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                        fullatt_block_indexes=[7, 15, 23, 31], window_size=112))
REDUCED = dict(text=dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2),
               vision=dict(depth=4, hidden_size=128, intermediate_size=384, num_heads=4, out_hidden_size=256,
                           fullatt_block_indexes=[1, 3], window_size=112))


def build(shapes: dict, device: str, dtype: torch.dtype) -> Qwen2_5_VLAdapter:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = char_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    head = shapes["text"]["hidden_size"] // shapes["text"]["num_attention_heads"]
    third = head // 2 // 8
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(tok), max_position_embeddings=4096, **shapes["text"],
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                          "mrope_section": [2 * third, 3 * third, head // 2 - 5 * third]},
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"]),
        vision_config=shapes["vision"], image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(cfg).to(dtype).eval()
    ip = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=1024 * 28 * 28)
    return Qwen2_5_VLAdapter(model, tok, ip, name="qwen2.5-vl-3b-shapes", level="L2")


def peak(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # process peak RSS, GiB


def timed(fn, device: str, repeat: int) -> float:
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=448)
    ap.add_argument("--downscale", type=int, default=224)
    ap.add_argument("--reduced", action="store_true", help="reduced shapes (default on CPU)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reduced = args.reduced or device == "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    vlm = build(REDUCED if reduced else FULL, device, dtype)
    n_params = sum(p.numel() for p in vlm.model.parameters()) / 1e9
    print(f"device {device}, {'reduced' if reduced else 'full 3B'} shapes ({n_params:.2f} B parameters), {dtype}, "
          f"image {args.size}x{args.size}")
    img = (np.random.default_rng(0).random((args.size, args.size, 3)) * 255).astype(np.uint8)
    sample = Sample("bench", img, "what is the value of the red bar?", "42", "number", "charts")
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float().div(255)

    def bare():
        xi = x.clone().requires_grad_(True)
        loss = vlm.score(xi, [sample.question], [sample.answer]).sequence_logprob().sum()
        torch.autograd.grad(loss, xi)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_bare, m_bare = timed(bare, device, args.repeat), peak(device)
    print(f"  bare forward+backward          {1000 * t_bare:9.1f} ms   peak {m_bare:6.2f} GiB")
    atk = EndPGD(steps=1, early_stop=False)
    for down in (None, args.downscale):
        xo = x if down is None else F.interpolate(x, size=(down, down), mode="bilinear", antialias=True)

        def step(xo=xo, size=tuple(x.shape[-2:])):
            d = torch.zeros_like(xo).requires_grad_(True)
            full = atk._full_delta(d, size)  # the noise field is upsampled and added at full resolution
            loss, _ = atk.objective(vlm, (x + full).clamp(0, 1), [sample], {})
            (g,) = torch.autograd.grad(loss.sum(), d)
            with torch.no_grad():
                (d + atk.step_size * g.sign()).clamp(-atk.eps, atk.eps)

        def step_small(xo=xo):  # the paper's fallback: the model sees the downscaled image while optimising
            d = torch.zeros_like(xo).requires_grad_(True)
            loss, _ = atk.objective(vlm, (xo + d).clamp(0, 1), [sample], {})
            (g,) = torch.autograd.grad(loss.sum(), d)

        fn = step if down is None else step_small
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t = timed(fn, device, args.repeat)
        label = f"PGD step, optimised at {down}px" if down else "PGD step, full resolution"
        print(f"  {label:30} {1000 * t:9.1f} ms   peak {peak(device):6.2f} GiB   ratio to bare {t / t_bare:5.2f}")
    print("  (on CPU the peak is the process's maximum RSS, so it never goes down; on a GPU it is reset per row)")


if __name__ == "__main__":
    main()
