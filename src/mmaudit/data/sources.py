"""What ``--data`` names: the bundled synthetic set, a JSONL of samples, or the paper's datasets in their formats.

A spec is ``synthetic[:N]`` (N per task family), a JSONL path, or comma-separated
``chartqa:FILE.json``, ``docvqa:FILE.json``, ``mme:DIR`` sources (JSONL paths may join them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mmaudit.data import loaders
from mmaudit.data.datasets import readers
from mmaudit.data.io import iter_jsonl
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError, UsageError


@dataclass
class Loaded:
    """The samples to audit, everything that was loaded (the wrong answers' vocabulary), and the bad records."""

    samples: list[Sample]
    pool: list[Sample]
    errors: list[InputError]


def load_data(spec: str, limit: int | None = None, select: int | None = None, seed: int = 0,
              prompt_suffix: str | None = None) -> Loaded:
    """Load a data spec; ``select``: the paper's balanced seeded draw over the sources; ``limit``: the first N;
    ``prompt_suffix``: the instruction every question is asked with, in place of each source's own ('' asks the
    bare question)."""
    from mmaudit.data.synthetic import FAMILIES, synthetic_set

    if spec.startswith("synthetic"):
        n = spec.split(":", 1)[1] if ":" in spec else "32"
        if not n.isdigit() or int(n) < 1:
            raise UsageError(f"--data {spec}: synthetic:N takes a positive number of questions per family")
        n = int(n)
        samples, errors = synthetic_set(n, seed=10_000, families=FAMILIES), []
        pool = samples
    else:
        items: dict[str, list] = {}
        known = readers()
        for part in spec.split(","):
            kind, _, path = part.partition(":")
            if kind in known and path:
                items[kind] = list(known[kind].read(path))
            elif Path(part).exists():
                items.setdefault("jsonl", []).extend(iter_jsonl(Path(part)))
            else:
                raise UsageError(f"--data {part}: no such file or folder; use synthetic[:N], a JSONL of samples, or "
                                 + ", ".join(f"{k}:PATH ({d.layouts or 'its own layout'})" for k, d in known.items()))
        errors = [x for v in items.values() for x in v if isinstance(x, InputError)]
        by = {k: [x for x in v if not isinstance(x, InputError)] for k, v in items.items()}
        pool = [s for v in by.values() for s in v]
        samples = loaders.select_balanced(by, select, seed) if select else pool
    if limit is not None:
        samples = samples[:limit]
    if prompt_suffix is not None:
        for s in pool + samples:
            s.instruction = prompt_suffix.strip()
    return Loaded(samples, pool, errors)


def prompts_in_force(samples: list[Sample]) -> dict[str, str]:
    """Per dataset (family), the instruction its questions are asked with ('' = the bare question; several
    instructions in one dataset are listed joined by ' | ')."""
    by: dict[str, set[str]] = {}
    for s in samples:
        by.setdefault(s.task_family, set()).add(s.instruction)
    return {k: " | ".join(sorted(v)) for k, v in sorted(by.items())}
