"""Hugging Face adapters (extra ``[hf]``): one module per family."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from mmaudit.errors import UsageError

# model_type -> (adapter "module:Class", PIL image processor "module:Class"); the PIL processors
# need no torchvision, and the adapters redo their work in torch.
_QWEN_IP = "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl:Qwen2VLImageProcessorPil"
FAMILIES = {
    "qwen2_5_vl": ("mmaudit.models.hf.qwen2_5_vl:Qwen2_5_VLAdapter", _QWEN_IP),
    "qwen2_vl": ("mmaudit.models.hf.qwen2_5_vl:Qwen2_5_VLAdapter", _QWEN_IP),
    "qwen3_vl": ("mmaudit.models.hf.qwen2_5_vl:Qwen2_5_VLAdapter", _QWEN_IP),
    "qwen3_5": ("mmaudit.models.hf.qwen2_5_vl:Qwen2_5_VLAdapter", _QWEN_IP),
    "blip-2": ("mmaudit.models.hf.blip2:Blip2Adapter",
               "transformers.models.blip.image_processing_pil_blip:BlipImageProcessorPil"),
    "instructblip": ("mmaudit.models.hf.instructblip:InstructBlipAdapter",
                     "transformers.models.blip.image_processing_pil_blip:BlipImageProcessorPil"),
    "smolvlm": ("mmaudit.models.hf.smolvlm:SmolVLMAdapter",
                "transformers.models.smolvlm.image_processing_pil_smolvlm:SmolVLMImageProcessorPil"),
    "gemma3": ("mmaudit.models.hf.gemma3:Gemma3Adapter",
               "transformers.models.gemma3.image_processing_pil_gemma3:Gemma3ImageProcessorPil"),
    "llava": ("mmaudit.models.hf.llava:LlavaAdapter",
              "transformers.models.llava.image_processing_pil_llava:LlavaImageProcessorPil"),
    "gemma4": ("mmaudit.models.hf.gemma4:Gemma4Adapter",
               "transformers.models.gemma4.image_processing_pil_gemma4:Gemma4ImageProcessorPil"),
    "deepseek_vl_hybrid": ("mmaudit.models.hf.deepseek_vl:DeepseekVLAdapter",
                           "transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid:"
                           "DeepseekVLHybridImageProcessorPil"),
}


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name)


def chat_template_of(path: str | Path, tokenizer) -> str | None:
    """The checkpoint's chat template: its processor's (``chat_template.jinja`` or ``chat_template.json``) first,
    as transformers' processors and vLLM prefer it, else the tokenizer's."""
    import json

    from transformers.utils import cached_file

    for name in ("chat_template.jinja", "chat_template.json"):
        found = cached_file(path, name, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
        if found:
            text = Path(found).read_text()
            return json.loads(text).get("chat_template") if name.endswith(".json") else text
    return getattr(tokenizer, "chat_template", None)


QWEN = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_5")


def load_hf(path: str | Path, level: str | None = None, dtype: str = "auto", device_map: str | dict | None = None,
            max_pixels: int | None = None):
    """Load a local or hub checkpoint (or one of the paper's 18 by short name) in its family's adapter, with the
    checkpoint's own chat template; ``max_pixels`` lowers a Qwen-family processor's pixel budget per image."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

    from mmaudit.models.hf.registry import check_supported

    entry = check_supported(str(path))
    if entry is not None:
        path, level = entry.hub_id, level or entry.level
    try:
        family = AutoConfig.from_pretrained(path).model_type
    except (OSError, ValueError) as e:  # offline, unknown id, a folder without a config
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--model {path}: not a local checkpoint folder, and it could not be loaded from the "
                         f"Hugging Face hub ({reason}); check the id, or download the checkpoint and pass its "
                         "folder (offline? set HF_HUB_OFFLINE=1 to skip the hub)") from None
    if family not in FAMILIES:
        raise UsageError(f"--model {path}: model family {family!r} has no adapter (supported: {sorted(FAMILIES)})")
    adapter, processor = (_load(s) for s in FAMILIES[family])
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, device_map=device_map)
    extra: dict = {"max_pixels": max_pixels} if max_pixels and family in QWEN else {}
    if family == "instructblip":  # its Q-Former reads the instruction with its own (BERT) tokenizer
        extra["qformer_tokenizer"] = AutoTokenizer.from_pretrained(path, subfolder="qformer_tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(path)
    return adapter(model, tokenizer, processor.from_pretrained(path), name=str(path), level=level,
                   chat_template=chat_template_of(path, tokenizer), **extra)
