"""Models by name: 'zoo' (all three levels), 'zoo:L2', one of the paper's 18, or a local/hub checkpoint[@level]."""

from __future__ import annotations

LEVELS = ("L1", "L2", "L3")


def expand(specs: list[str]) -> list[str]:
    """'zoo' stands for its three levels; everything else names one model."""
    out: list[str] = []
    for s in specs:
        out += [f"zoo:{lv}" for lv in LEVELS] if s == "zoo" else [s]
    return out


def load_model(spec: str, dtype: str = "float32", device_map=None):
    if spec.startswith("zoo:"):
        from mmaudit.models.zoo.adapter import load_zoo

        return load_zoo(spec.split(":", 1)[1])
    from mmaudit.models.hf import load_hf

    path, _, level = spec.rpartition("@") if "@" in spec else (spec, "", "")
    return load_hf(path, level=level or None, dtype=dtype, device_map=device_map)
