"""The 18 models the FusionAudit paper audits: hub id, fusion level, and their transformers model type.

Levels follow the paper's taxonomy (Experimental Setup) and agree with the level the family registry
(:mod:`mmaudit.models.hf.families`) gives each model type; a model is supported when its model type has a
registered adapter. The paper names models, not hub ids, so
the ids here are the usual Hugging Face names (check them against your mirror; DeepSeek-VL is the
transformers-native conversion). Qwen-VL-Chat ships only as remote code; it runs on mmaudit's native
implementation (:mod:`mmaudit.models.hf.qwen_vl`, model type ``qwen``). ``published`` holds clean-accuracy
figures from a model's own card where one was checked (dataset -> (fraction, source)); the validity check
(:mod:`mmaudit.report.validity`) warns when an audit's clean accuracy falls far below them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmaudit.errors import UsageError


@dataclass(frozen=True)
class Entry:
    name: str
    hub_id: str
    level: str
    model_type: str  # transformers' config.model_type
    note: str = ""
    published: tuple[tuple[str, tuple[float, str]], ...] = ()

    @property
    def supported(self) -> bool:
        from mmaudit.models.hf.families import lookup

        return lookup(self.model_type) is not None


PAPER_MODELS: tuple[Entry, ...] = (
    Entry("SmolVLM2-2.2B", "HuggingFaceTB/SmolVLM2-2.2B-Instruct", "L1", "smolvlm"),
    Entry("BLIP2-OPT-2.7B", "Salesforce/blip2-opt-2.7b", "L1", "blip-2"),
    Entry("InstructBLIP-Vicuna-7B", "Salesforce/instructblip-vicuna-7b", "L1", "instructblip"),
    Entry("LLaVA-1.5-7B", "llava-hf/llava-1.5-7b-hf", "L1", "llava"),
    Entry("Qwen-VL-Chat", "Qwen/Qwen-VL-Chat", "L2", "qwen"),
    Entry("Qwen2-VL-2B", "Qwen/Qwen2-VL-2B-Instruct", "L2", "qwen2_vl"),
    Entry("Qwen2.5-VL-3B", "Qwen/Qwen2.5-VL-3B-Instruct", "L2", "qwen2_5_vl",
          published=(("docvqa", (0.939, "model card, DocVQA test ANLS")),)),
    Entry("Qwen2.5-VL-7B", "Qwen/Qwen2.5-VL-7B-Instruct", "L2", "qwen2_5_vl"),
    Entry("Gemma3-4B", "google/gemma-3-4b-it", "L2", "gemma3"),
    Entry("Gemma3-12B", "google/gemma-3-12b-it", "L2", "gemma3"),
    Entry("DeepSeek-VL-7B", "deepseek-community/deepseek-vl-7b-chat", "L2", "deepseek_vl_hybrid"),
    Entry("Qwen3-VL-2B", "Qwen/Qwen3-VL-2B-Instruct", "L3", "qwen3_vl"),
    Entry("Qwen3-VL-4B", "Qwen/Qwen3-VL-4B-Instruct", "L3", "qwen3_vl"),
    Entry("Qwen3-VL-8B", "Qwen/Qwen3-VL-8B-Instruct", "L3", "qwen3_vl"),
    Entry("Qwen3.5-2B", "Qwen/Qwen3.5-2B", "L3", "qwen3_5"),
    Entry("Qwen3.5-4B", "Qwen/Qwen3.5-4B", "L3", "qwen3_5"),
    Entry("Qwen3.5-9B", "Qwen/Qwen3.5-9B", "L3", "qwen3_5"),
    Entry("Gemma4-E4B", "google/gemma-4-e4b-it", "L3", "gemma4"),
)
BY_NAME = {e.name.lower(): e for e in PAPER_MODELS} | {e.hub_id.lower(): e for e in PAPER_MODELS}


class NotSupportedYet(UsageError, NotImplementedError):
    """A paper model without a working adapter here."""


def lookup(spec: str) -> Entry | None:
    """The paper entry for a short name ('Qwen2.5-VL-3B') or hub id, if it is one of the 18."""
    return BY_NAME.get(spec.lower())


def check_supported(spec: str) -> Entry | None:
    """Raise a clear error for a paper model without a working adapter; return its entry otherwise."""
    e = lookup(spec)
    if e is not None and not e.supported:
        raise NotSupportedYet(f"{e.name} ({e.hub_id}, {e.level}): {e.note}")
    return e
