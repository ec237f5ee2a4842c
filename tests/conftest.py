import importlib

import pytest
import torch

torch.set_num_threads(2)


def tiny_adapter(builder: str, adapter: str, name: str, level: str):
    """A tiny offline HF model (``mmaudit.models.hf.tiny.<builder>``) wrapped in ``mmaudit.models.hf.<adapter>``."""
    pytest.importorskip("transformers")
    from mmaudit.models.hf import tiny

    module, _, cls = adapter.partition(":")
    built = getattr(tiny, builder)(seed=0)
    extra = {"qformer_tokenizer": built[3]} if len(built) == 4 else {}
    return getattr(importlib.import_module(f"mmaudit.models.hf.{module}"), cls)(*built[:3], name=name, level=level,
                                                                                **extra)


@pytest.fixture(scope="session")
def tiny_qwen():
    return tiny_adapter("tiny_qwen2_5_vl", "qwen2_5_vl:Qwen2_5_VLAdapter", "tiny-qwen2.5-vl", "L2")


@pytest.fixture(scope="session")
def tiny_qwen2():
    return tiny_adapter("tiny_qwen2_vl", "qwen2_5_vl:Qwen2_5_VLAdapter", "tiny-qwen2-vl", "L2")


@pytest.fixture(scope="session")
def tiny_qwen3():
    return tiny_adapter("tiny_qwen3_vl", "qwen2_5_vl:Qwen2_5_VLAdapter", "tiny-qwen3-vl", "L3")


@pytest.fixture(scope="session")
def tiny_qwen35():
    return tiny_adapter("tiny_qwen3_5", "qwen2_5_vl:Qwen2_5_VLAdapter", "tiny-qwen3.5", "L3")


@pytest.fixture(scope="session")
def tiny_llava():
    return tiny_adapter("tiny_llava", "llava:LlavaAdapter", "tiny-llava-1.5", "L1")


@pytest.fixture(scope="session")
def tiny_gemma3():
    return tiny_adapter("tiny_gemma3", "gemma3:Gemma3Adapter", "tiny-gemma3", "L2")


@pytest.fixture(scope="session")
def tiny_blip2():
    return tiny_adapter("tiny_blip2", "blip2:Blip2Adapter", "tiny-blip2", "L1")


@pytest.fixture(scope="session")
def tiny_instructblip():
    return tiny_adapter("tiny_instructblip", "instructblip:InstructBlipAdapter", "tiny-instructblip", "L1")


@pytest.fixture(scope="session")
def tiny_smolvlm():
    return tiny_adapter("tiny_smolvlm", "smolvlm:SmolVLMAdapter", "tiny-smolvlm", "L1")


@pytest.fixture(scope="session")
def zoo():
    from mmaudit.models.zoo.adapter import load_zoo

    return {level: load_zoo(level) for level in ("L1", "L2", "L3")}


@pytest.fixture(scope="session")
def tiny_gemma4():
    return tiny_adapter("tiny_gemma4", "gemma4:Gemma4Adapter", "tiny-gemma4", "L3")


@pytest.fixture(scope="session")
def tiny_deepseek_vl():
    return tiny_adapter("tiny_deepseek_vl", "deepseek_vl:DeepseekVLAdapter", "tiny-deepseek-vl", "L2")
