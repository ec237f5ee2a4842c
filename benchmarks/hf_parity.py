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

from conftest import tiny_adapter  # noqa: E402
from test_hf_fidelity import FAMILIES, PIXEL_KEYS, SIZES, load, pixels, real_image, with_processor  # noqa: E402

BUILDERS = {"tiny_qwen": ("tiny_qwen2_5_vl", "qwen2_5_vl:Qwen2_5_VLAdapter"),
            "tiny_qwen3": ("tiny_qwen3_vl", "qwen2_5_vl:Qwen2_5_VLAdapter"),
            "tiny_llava": ("tiny_llava", "llava:LlavaAdapter"),
            "tiny_gemma3": ("tiny_gemma3", "gemma3:Gemma3Adapter"),
            "tiny_smolvlm": ("tiny_smolvlm", "smolvlm:SmolVLMAdapter"),
            "tiny_blip2": ("tiny_blip2", "blip2:Blip2Adapter"),
            "tiny_gemma4": ("tiny_gemma4", "gemma4:Gemma4Adapter"),
            "tiny_deepseek_vl": ("tiny_deepseek_vl", "deepseek_vl:DeepseekVLAdapter")}


def main() -> None:
    torch.set_num_threads(2)
    print("| family | image (h x w) | input | mean abs diff | max abs diff | one 8-bit level after normalisation |")
    print("| --- | --- | --- | --- | --- | --- |")
    for family, (fixture, cls, settings) in FAMILIES.items():
        processor = load(cls)(**settings)
        vlm = with_processor(tiny_adapter(*BUILDERS[fixture], name=family, level="L2"), processor)
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
