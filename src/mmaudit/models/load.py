"""Models by name, put where they run: 'zoo' (all three levels), 'zoo:L2', one of the paper's 18, or a hub id or
local checkpoint folder[@level], on a device and in a precision; or 'endpoint:MODEL@URL', a deployed VLM behind an
OpenAI-compatible endpoint (black-box: :mod:`mmaudit.models.blackbox`).

``Placement`` is the one place device and precision are decided, for the local executor and for every Ray
actor alike: ``auto`` means the GPU in bfloat16 when there is one, the CPU in float32 otherwise; an actor
that Ray gave a GPU sees it as ``cuda`` (Ray sets ``CUDA_VISIBLE_DEVICES``), so the same ``auto`` puts its model
there. The zoo's tiny models always run in float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from mmaudit.errors import UsageError
from mmaudit.models.levels import LEVELS

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CHECKPOINTS = ("auto", "none", "mlp", "mlp+norms", "layers")


class PlacementError(UsageError):
    """A device or precision that cannot be had here."""


@dataclass(frozen=True)
class Placement:
    """Where a model runs and in what precision, as asked (``auto`` allowed) and as resolved."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    device_map: str | None = None  # e.g. "auto": shard a model larger than one card over the visible GPUs
    max_pixels: int | None = None  # Qwen family: the processor's pixel budget per image (its token count)
    activation_checkpointing: str = "auto"  # in attacks: auto (mlp+norms on a GPU, none on CPU), none, mlp,
    # mlp+norms, layers

    def __post_init__(self) -> None:
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise PlacementError(f"--device {self.device!r}: use one of {', '.join(DEVICES)} or cuda:N")
        if self.dtype not in DTYPES:
            raise PlacementError(f"--dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.activation_checkpointing not in CHECKPOINTS:
            raise PlacementError(f"--activation-checkpointing {self.activation_checkpointing!r}: use one of "
                                 f"{', '.join(CHECKPOINTS)}")

    def resolved_checkpointing(self, device: str | None = None) -> str:
        if self.activation_checkpointing != "auto":
            return self.activation_checkpointing
        # mlp+norms: 0.86 GiB kept per sample at 448 px on the 3B shapes for 1.26x the FLOPs of a step, against
        # 2.52 GiB without (benchmarks/activation_memory.py)
        return "mlp+norms" if (device or self.resolved_device()).startswith("cuda") else "none"

    def batch(self, asked: str | int) -> int:
        """``--batch``: a number, or auto: 64 to start with on a GPU (halved on running out of memory, the size
        that fits remembered), 32 on CPU."""
        if str(asked) == "auto":
            return 64 if self.resolved_device().startswith("cuda") else 32
        try:
            value = int(asked)
        except ValueError:
            raise PlacementError(f"--batch {asked!r}: a positive number or auto") from None
        if value < 1:
            raise PlacementError(f"--batch {asked!r}: a positive number or auto")
        return value

    def resolved_device(self) -> str:
        cuda = torch.cuda.is_available()
        if self.device == "auto":
            return "cuda" if cuda else "cpu"
        if self.device.startswith("cuda"):
            if not cuda:
                raise PlacementError(f"--device {self.device}: no CUDA device is visible here (torch "
                                     f"{torch.__version__}, CUDA available: no); use --device cpu or auto")
            index = int(self.device.partition(":")[2] or 0)
            if index >= torch.cuda.device_count():
                raise PlacementError(f"--device {self.device}: only {torch.cuda.device_count()} CUDA device(s) visible")
        return self.device

    def resolved_dtype(self, device: str | None = None) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if (device or self.resolved_device()).startswith("cuda") else "float32"

    def describe(self) -> dict:
        """What the run record keeps: as asked, as resolved, and the GPU's name."""
        device = self.resolved_device()
        gpu = None
        if device.startswith("cuda"):
            index = int(device.partition(":")[2] or 0)
            gpu = torch.cuda.get_device_name(index)
        return asdict(self) | {"resolved_device": device, "resolved_dtype": self.resolved_dtype(device), "gpu": gpu,
                               "resolved_checkpointing": self.resolved_checkpointing(device)}


def expand(specs: list[str]) -> list[str]:
    """'zoo' stands for its three levels; everything else names one model."""
    out: list[str] = []
    for s in specs:
        out += [f"zoo:{lv}" for lv in LEVELS] if s == "zoo" else [s]
    return out


def check_spec(spec: str) -> None:
    """Refuse, before anything is written, a model spec that cannot name a model: an unknown zoo level or fusion
    level, a folder that does not exist."""
    from pathlib import Path

    if spec.startswith("endpoint:"):
        from mmaudit.models.blackbox import parse_endpoint

        parse_endpoint(spec)
        return
    if spec.startswith("zoo:"):
        if spec[4:] not in LEVELS:
            raise UsageError(f"--model {spec}: unknown zoo level {spec[4:]!r}; use zoo, zoo:L1, zoo:L2 or zoo:L3")
        return
    path, _, level = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if level and level not in LEVELS:
        raise UsageError(f"--model {spec}: unknown fusion level {level!r} after '@'; use @L1, @L2 or @L3")
    if path.startswith((".", "/", "~")) and not Path(path).expanduser().exists():
        raise UsageError(f"--model {spec}: no such checkpoint folder {path}")


def load_model(spec: str, placement: Placement | None = None, endpoint: dict | None = None):
    """One model by spec, placed as ``placement`` says (default: auto); ``endpoint``: the chat client's settings
    for an endpoint target (concurrency, price_per_1k, budget, max_tokens). A spec that carries a delivery
    channel or defence (``zoo:L1#channel=jpeg:75``, :mod:`mmaudit.models.channel`) loads behind it."""
    from mmaudit.models.channel import behind, split_pipeline

    spec, pipeline = split_pipeline(spec)
    if pipeline is not None:
        return behind(load_model(spec, placement, endpoint), pipeline)
    check_spec(spec)
    if spec.startswith("endpoint:"):
        from mmaudit.models.blackbox import EndpointVLM, parse_endpoint

        return EndpointVLM(*parse_endpoint(spec), **(endpoint or {}))
    placement = placement or Placement()
    device = placement.resolved_device()
    if spec.startswith("zoo:"):
        from mmaudit.models.zoo.adapter import load_zoo

        if placement.dtype not in ("auto", "float32"):
            raise PlacementError(f"{spec}: the zoo's tiny models run in float32 only (got --dtype {placement.dtype})")
        return load_zoo(spec.split(":", 1)[1], device=device)
    from mmaudit.models.hf import load_hf

    path, _, level = spec.rpartition("@") if "@" in spec else (spec, "", "")
    device_map = placement.device_map or (None if device == "cpu" else device)
    vlm = load_hf(path, level=level or None, dtype=placement.resolved_dtype(device), device_map=device_map,
                  max_pixels=placement.max_pixels)
    vlm.activation_checkpointing = placement.resolved_checkpointing(device)
    return vlm
