"""Clean exact-match accuracy of any VLM per synthetic family (the zoo's acceptance metric)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.data.sample import Sample
from mmaudit.models.vlm import VLM, pixels
from mmaudit.normalise import spaced

TASK_FAMILIES = ("charts", "documents", "scenes")


def predict(vlm: VLM, samples: list[Sample], batch: int = 128, progress=None) -> list[str]:
    out: list[str] = []
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        out += vlm.generate(pixels([s.image for s in chunk]), [s.question for s in chunk])
        if progress is not None:
            progress(len(chunk))
    return out


def accuracy_by_family(vlm: VLM, samples: list[Sample], batch: int = 128, progress=None) -> dict[str, float]:
    """Percent exactly right (normalised) per family; ``overall`` pools the task families only."""
    preds = predict(vlm, samples, batch, progress)
    hits: dict[str, list[bool]] = defaultdict(list)
    for s, p in zip(samples, preds):
        ok = spaced(p) == spaced(s.answer)
        hits[s.task_family].append(ok)
        if s.task_family in TASK_FAMILIES:
            hits["overall"].append(ok)
    return {k: round(100.0 * float(np.mean(v)), 1) for k, v in hits.items()}
