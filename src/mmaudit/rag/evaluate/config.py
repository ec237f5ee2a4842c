"""How a stack is evaluated: the token budget per component, what Full-MM is sent (the methods are the registered
routers: :mod:`mmaudit.rag.evaluate.methods`)."""

from __future__ import annotations

from dataclasses import dataclass, field

PARAMETRIC_MODES = ("per-row", "per-question")


COMPONENTS = ("answer", "gate", "resolver", "judge")


# New-token budgets per component. An endpoint's must let a valid answer through (a minimal E.3 resolver JSON is
# ~104 tokens, a long-form answer several hundred); the embedded 135M model on 2 cores gets short ones.
ENDPOINT_BUDGET = {"answer": 512, "gate": 256, "resolver": 768, "judge": 256}


# Under guided decoding a label costs no budget: the embedded budgets bound the free text (reasons, final_answer).
EMBEDDED_BUDGET = {"answer": 40, "gate": 0, "resolver": 6, "judge": 0}


@dataclass
class BenchConfig:
    """How a stack is run: what the Full-MM model is sent, token budgets, Parametric generation, evidence size."""

    stack: str = "default"
    limit: int | None = None
    vision: bool = False  # Full-MM gets the image's pixels (a base64 data URL); else its OCR text
    image_size: int = 768  # longest side of the image sent, in pixels (never upscaled)
    image_detail: str = "auto"  # OpenAI's image detail ("auto", "low", "high"); "" leaves it out
    parametric: str = "per-row"  # the paper: "generated independently per benchmark row"
    budgets: dict = field(default_factory=lambda: dict(ENDPOINT_BUDGET))
    passages: int | None = None  # evidence cut for a small model (None: the row's five passages, whole)
    pipeline: bool = True  # rows flow through the components as their inputs exist (an async endpoint client)
    rows_in_flight: int = 128  # pipelined: rows under way at once (bounds the images held as data URLs)
    words: int | None = None

    def __post_init__(self) -> None:
        if self.parametric not in PARAMETRIC_MODES:
            raise ValueError(f"parametric must be one of {PARAMETRIC_MODES}, got {self.parametric!r}")
        if self.rows_in_flight < 1:
            raise ValueError(f"rows_in_flight must be at least 1, got {self.rows_in_flight}")
        unknown = set(self.budgets) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown budget components {sorted(unknown)}; choose from {COMPONENTS}")
