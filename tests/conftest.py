import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_qwen():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
    from mmaudit.models.hf.tiny import tiny_qwen2_5_vl

    model, tok, ip = tiny_qwen2_5_vl(seed=0)
    return Qwen2_5_VLAdapter(model, tok, ip, name="tiny-qwen2.5-vl", level="L2")


@pytest.fixture(scope="session")
def zoo():
    from mmaudit.models.zoo.adapter import load_zoo

    return {level: load_zoo(level) for level in ("L1", "L2", "L3")}


@pytest.fixture(scope="session")
def tiny_qwen2():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
    from mmaudit.models.hf.tiny import tiny_qwen2_vl

    model, tok, ip = tiny_qwen2_vl(seed=0)
    return Qwen2_5_VLAdapter(model, tok, ip, name="tiny-qwen2-vl", level="L2")


@pytest.fixture(scope="session")
def tiny_llava():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.llava import LlavaAdapter
    from mmaudit.models.hf.tiny import tiny_llava

    model, tok, ip = tiny_llava(seed=0)
    return LlavaAdapter(model, tok, ip, name="tiny-llava-1.5", level="L1")


@pytest.fixture(scope="session")
def tiny_qwen3():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
    from mmaudit.models.hf.tiny import tiny_qwen3_vl

    model, tok, ip = tiny_qwen3_vl(seed=0)
    return Qwen2_5_VLAdapter(model, tok, ip, name="tiny-qwen3-vl", level="L3")


@pytest.fixture(scope="session")
def tiny_qwen35():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
    from mmaudit.models.hf.tiny import tiny_qwen3_5

    model, tok, ip = tiny_qwen3_5(seed=0)
    return Qwen2_5_VLAdapter(model, tok, ip, name="tiny-qwen3.5", level="L3")


@pytest.fixture(scope="session")
def tiny_gemma3():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.gemma3 import Gemma3Adapter
    from mmaudit.models.hf.tiny import tiny_gemma3

    model, tok, ip = tiny_gemma3(seed=0)
    return Gemma3Adapter(model, tok, ip, name="tiny-gemma3", level="L2")


@pytest.fixture(scope="session")
def tiny_blip2():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.blip2 import Blip2Adapter
    from mmaudit.models.hf.tiny import tiny_blip2

    model, tok, ip = tiny_blip2(seed=0)
    return Blip2Adapter(model, tok, ip, name="tiny-blip2", level="L1")


@pytest.fixture(scope="session")
def tiny_instructblip():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.instructblip import InstructBlipAdapter
    from mmaudit.models.hf.tiny import tiny_instructblip

    model, tok, ip, qtok = tiny_instructblip(seed=0)
    return InstructBlipAdapter(model, tok, ip, name="tiny-instructblip", level="L1", qformer_tokenizer=qtok)


@pytest.fixture(scope="session")
def tiny_smolvlm():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.smolvlm import SmolVLMAdapter
    from mmaudit.models.hf.tiny import tiny_smolvlm

    model, tok, ip = tiny_smolvlm(seed=0)
    return SmolVLMAdapter(model, tok, ip, name="tiny-smolvlm", level="L1")
