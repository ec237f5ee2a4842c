"""Pixel parity of every Hugging Face adapter with its family's PIL processor, at the settings real checkpoints
publish, on real-size images: the mean and largest absolute difference of the model inputs (after normalisation),
per family and image. The assertions live in tests/test_hf_fidelity.py; this prints the figures.

    .venv/bin/python benchmarks/hf_parity.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402

from test_hf_fidelity import PIXEL_KEYS, PUBLISHED, SIZES, pixels, published, real_image  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    print("| family | image (h x w) | input | mean abs diff | max abs diff | one 8-bit level after normalisation |")
    print("| --- | --- | --- | --- | --- | --- |")
    for family in PUBLISHED:  # every family of the registry, at the settings its checkpoints publish
        vlm, processor = published(family)
        level = 1 / 255 / (min(processor.image_std) if getattr(processor, "do_normalize", True) else 1.0)
        for k, (h, w) in enumerate(SIZES):
            img = real_image(h, w, k)
            nested = family.startswith(("smolvlm", "gemma4"))
            ref = processor(images=[[img]] if nested else [img], return_tensors="pt")
            ours, _ = vlm.preprocess([pixels(img)])
            for key in (k for k in PIXEL_KEYS if k in ref):
                d = (ours[key].float() - ref[key].float()).abs()
                print(f"| {family} | {h} x {w} | {key} | {float(d.mean()):.2e} | {float(d.max()):.2e} | {level:.4f} |")


if __name__ == "__main__":
    main()
