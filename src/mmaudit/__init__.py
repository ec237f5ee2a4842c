"""mmaudit: audit how far the visual channel can be used against VLMs and multimodal RAG.

The public API (see docs/python.md)::

    import mmaudit
    vlm = mmaudit.load_model("zoo:L2")                   # or mmaudit.wrap_hf(your_model, your_processor)
    adv = mmaudit.EndPGD(vlm, eps=8/255, steps=40)(images, questions, answers)
    result = mmaudit.audit(vlm, "synthetic:8", attacks=["end_pgd", "typo_evid"])
    print(result.levels["L2"].r_plus, result.to_pandas().head())

Names load on first use, so ``import mmaudit`` (and the command line's start) stays light.
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

_API = {
    "load_model": "mmaudit.api", "wrap_hf": "mmaudit.api", "open_run": "mmaudit.api", "attack": "mmaudit.api",
    "AuditResult": "mmaudit.api", "LevelResult": "mmaudit.api", "ModelResult": "mmaudit.api",
    "Estimate": "mmaudit.api", "TensorAttack": "mmaudit.api", "EndPGD": "mmaudit.api", "VisPGD": "mmaudit.api",
    "MANTIS": "mmaudit.api", "build_qimg7": "mmaudit.api", "run_satr": "mmaudit.api",
    "Sample": "mmaudit.data.sample", "use": "mmaudit.plugins",
}

__all__ = ["__version__", "audit", *_API]


def __getattr__(name: str):
    if name == "audit":  # the package mmaudit.audit, which is callable as the audit function
        return import_module("mmaudit.audit")
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'mmaudit' has no attribute {name!r}")
