"""Evidence preservation, OCR half: does non-generative OCR still read the ground truth after a Nat-Evid edit?

Counted, as in the paper, on chart and document samples where OCR reads the
reference answer on the clean image; the rate is the share of those where it
still reads it on the edited one. (The other half, masking the inserted clue
with black, needs the model and runs with each text attack:
:mod:`mmaudit.pathways.text.runner`.) An audit stage after the models: it reads and writes the run store, so it
lives here and not under :mod:`mmaudit.pathways`.
"""

from __future__ import annotations

from collections.abc import Callable

from mmaudit.data import datasets
from mmaudit.data.sample import Sample, sample_fingerprint
from mmaudit.pathways.text.base import Edit
from mmaudit.pathways.text.ocr import ocr_available, read_lines, reads
from mmaudit.store import RunStore, key_of


def ocr_evidence(store: RunStore, samples: list[Sample], attack, edits, limit: int,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
    """OCR the clean and the edited image of the first ``limit`` samples (by id) of the datasets declared for the
    check (charts and documents: :mod:`mmaudit.data.datasets`)."""
    if not ocr_available():
        store.put({"kind": "ocr_unavailable", "key": key_of(kind="ocr_unavailable"),
                   "reason": "rapidocr is not installed (pip install 'mmaudit[ocr]')"})
        return
    todo = sorted((s for s in samples if datasets.ocr_evidence(s.task_family)), key=lambda s: s.id)[:limit]
    for n, s in enumerate(todo, 1):
        key = key_of(kind="ocr", sample=sample_fingerprint(s), attack=attack.params())
        if key not in store:
            edit = edits.get(attack, s)[0]
            if isinstance(edit, Edit):
                clean, edited = read_lines(s.image), read_lines(edit.image)
                store.put({"kind": "ocr", "key": key, "sample": s.id, "family": s.task_family, "attack": attack.name,
                           "reference": s.answer, "clean_reads": reads(clean, s.answer),
                           "edited_reads": reads(edited, s.answer), "clean_text": [ln.text for ln in clean],
                           "edited_text": [ln.text for ln in edited]})
        if progress:
            progress("OCR evidence check", n, len(todo))
