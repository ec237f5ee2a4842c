"""The 18 models the FusionAudit paper audits: hub id, fusion level, and which adapter serves them.

Levels follow the paper's taxonomy (Experimental Setup); the paper names models, not hub ids, so
the ids here are the usual Hugging Face names (check them against your mirror). A family without an
adapter yet, or one that needs remote code (Qwen-VL-Chat, DeepSeek-VL), is
listed with the reason rather than failing deep inside transformers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str
    hub_id: str
    level: str
    family: str  # transformers model_type
    supported: bool
    note: str = ""


_REMOTE = "needs trust_remote_code (custom modelling code); not supported yet"
_TODO = "adapter not written yet (see issue: HF adapters for the paper's families)"

PAPER_MODELS: tuple[Entry, ...] = (
    Entry("SmolVLM2-2.2B", "HuggingFaceTB/SmolVLM2-2.2B-Instruct", "L1", "smolvlm", True),
    Entry("BLIP2-OPT-2.7B", "Salesforce/blip2-opt-2.7b", "L1", "blip-2", True),
    Entry("InstructBLIP-Vicuna-7B", "Salesforce/instructblip-vicuna-7b", "L1", "instructblip", True),
    Entry("LLaVA-1.5-7B", "llava-hf/llava-1.5-7b-hf", "L1", "llava", True),
    Entry("Qwen-VL-Chat", "Qwen/Qwen-VL-Chat", "L2", "qwen", False, _REMOTE),
    Entry("Qwen2-VL-2B", "Qwen/Qwen2-VL-2B-Instruct", "L2", "qwen2_vl", True),
    Entry("Qwen2.5-VL-3B", "Qwen/Qwen2.5-VL-3B-Instruct", "L2", "qwen2_5_vl", True),
    Entry("Qwen2.5-VL-7B", "Qwen/Qwen2.5-VL-7B-Instruct", "L2", "qwen2_5_vl", True),
    Entry("Gemma3-4B", "google/gemma-3-4b-it", "L2", "gemma3", True),
    Entry("Gemma3-12B", "google/gemma-3-12b-it", "L2", "gemma3", True),
    Entry("DeepSeek-VL-7B", "deepseek-ai/deepseek-vl-7b-chat", "L2", "multi_modality", False, _REMOTE),
    Entry("Qwen3-VL-2B", "Qwen/Qwen3-VL-2B-Instruct", "L3", "qwen3_vl", True),
    Entry("Qwen3-VL-4B", "Qwen/Qwen3-VL-4B-Instruct", "L3", "qwen3_vl", True),
    Entry("Qwen3-VL-8B", "Qwen/Qwen3-VL-8B-Instruct", "L3", "qwen3_vl", True),
    Entry("Qwen3.5-2B", "Qwen/Qwen3.5-2B", "L3", "qwen3_5", True),
    Entry("Qwen3.5-4B", "Qwen/Qwen3.5-4B", "L3", "qwen3_5", True),
    Entry("Qwen3.5-9B", "Qwen/Qwen3.5-9B", "L3", "qwen3_5", True),
    Entry("Gemma4-E4B", "google/gemma-4-e4b-it", "L3", "gemma4", False, _TODO),
)
BY_NAME = {e.name.lower(): e for e in PAPER_MODELS} | {e.hub_id.lower(): e for e in PAPER_MODELS}


class NotSupportedYet(NotImplementedError):
    pass


def lookup(spec: str) -> Entry | None:
    """The paper entry for a short name ('Qwen2.5-VL-3B') or hub id, if it is one of the 18."""
    return BY_NAME.get(spec.lower())


def check_supported(spec: str) -> Entry | None:
    """Raise a clear error for a paper model without a working adapter; return its entry otherwise."""
    e = lookup(spec)
    if e is not None and not e.supported:
        raise NotSupportedYet(f"{e.name} ({e.hub_id}, {e.level}): {e.note}")
    return e
