import pytest
import torch

torch.set_num_threads(2)

_TINY: dict = {}


def tiny_model(model_type: str):
    """The tiny offline HF model the family registry declares for ``model_type``, in its adapter at its level (one
    per session)."""
    pytest.importorskip("transformers")
    from mmaudit.models.hf.families import families

    if model_type not in _TINY:
        _TINY[model_type] = families()[model_type].tiny(name=f"tiny-{model_type}")
    return _TINY[model_type]


def _session(model_type: str):
    @pytest.fixture(scope="session")
    def fixture():
        return tiny_model(model_type)

    return fixture


tiny_qwen = _session("qwen2_5_vl")
tiny_qwen2 = _session("qwen2_vl")
tiny_qwen3 = _session("qwen3_vl")
tiny_qwen35 = _session("qwen3_5")
tiny_llava = _session("llava")
tiny_gemma3 = _session("gemma3")
tiny_blip2 = _session("blip-2")
tiny_instructblip = _session("instructblip")
tiny_smolvlm = _session("smolvlm")
tiny_gemma4 = _session("gemma4")
tiny_deepseek_vl = _session("deepseek_vl_hybrid")


@pytest.fixture(scope="session")
def zoo():
    from mmaudit.models.zoo.adapter import load_zoo

    return {level: load_zoo(level) for level in ("L1", "L2", "L3")}
