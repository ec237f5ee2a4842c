"""Hugging Face adapters (extra ``[hf]``): one module per family."""

from __future__ import annotations

from pathlib import Path

FAMILIES = {"qwen2_5_vl": "Qwen2_5_VLAdapter", "qwen2_vl": "Qwen2_5_VLAdapter"}


def load_hf(path: str | Path, level: str | None = None, dtype: str = "auto", device_map: str | dict | None = None):
    """Load a local or hub checkpoint and wrap it in its family's adapter."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

    cfg = AutoConfig.from_pretrained(path)
    family = cfg.model_type
    if family not in FAMILIES:
        raise NotImplementedError(f"model family {family!r} is not supported yet (supported: {sorted(FAMILIES)})")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter

    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, device_map=device_map)
    tok = AutoTokenizer.from_pretrained(path)
    ip = Qwen2VLImageProcessorPil.from_pretrained(path)
    return Qwen2_5_VLAdapter(model, tok, ip, name=str(path), level=level)
