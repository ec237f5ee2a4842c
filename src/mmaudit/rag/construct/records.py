"""QIMG-7 records in the release's own layout, with what a model may see kept apart.

One evaluated row is one question x regime: five text passages (clean or
polluted) and one image evidence item. Inference fields are the passages'
title/snippet/url and the image's pixels, alt text, title and page url;
everything else (regime labels, pollution status, attack family, rationale,
donor ids, manipulation prompts) is construction-only and never reaches a
prompt: :meth:`RegimeRow.model_view` is the only thing prompts are built from.

Unknown fields in released files are kept (``extra="allow"``), so importing a
release and exporting it again round-trips every field.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mmaudit.errors import InputError
from mmaudit.jsonout import dumps

TEXT_FAMILIES = ("Unambiguous", "Conflicting", "Misleading", "Fabricated")
IMAGE_ATTACKS = ("caption_flip", "entity_swap", "semantic_entity_rewrite", "figstep_typography",
                 "adversarial_patch", "image_blend", "neural_style_transfer")
REGIMES = ("TC_IC", "TP_IC") + tuple(f"T{t}_IP_{a}" for a in IMAGE_ATTACKS for t in ("C", "P"))


def regime_parts(regime: str) -> tuple[str, str]:
    """('clean' | 'polluted' text, 'clean' | attack name)."""
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}")
    text = "clean" if regime.startswith("TC") else "polluted"
    return text, "clean" if regime.endswith("_IC") else regime.split("_IP_", 1)[1]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextEvidence(_Open):
    title: str = ""
    snippet: str
    url: str = ""


class ImageMetadata(_Open):
    """Construction-only: how the image evidence was made."""

    question_idx: int | str = ""
    image_idx: int | str = ""
    manipulation_method: str = ""
    manipulation_prompt: str = ""
    donor_question_idx: int | str = ""
    rationale: str = ""
    original_alt: str = ""
    polluted_alt: str = ""


class ImageEvidence(_Open):
    image_url: str = ""
    url: str = ""
    alt_text: str = ""
    title: str = ""
    page_url: str = ""
    resolved_local_path: str = ""
    local_path: str = ""
    pollution_type: str = "clean"  # construction-only
    metadata: ImageMetadata = ImageMetadata()  # construction-only


class RegimeRow(_Open):
    row_id: int
    qid: int | str
    dataset: str
    question: str
    regime: str  # construction-only, as are the three fields below
    text_status: str
    image_status: str
    image_pollution_type: str
    text_evidence: list[TextEvidence]
    image_evidence: ImageEvidence

    def model_view(self) -> dict:
        """Everything a branch, router or judge prompt may be built from, and nothing else."""
        im = self.image_evidence
        return {
            "question": self.question,
            "text_evidence": [{"title": t.title, "snippet": t.snippet, "url": t.url} for t in self.text_evidence],
            "image": {"alt_text": im.alt_text, "title": im.title, "page_url": im.page_url,
                      "path": im.local_path or im.resolved_local_path},
        }


CONSTRUCTION_ONLY_ROW = ("regime", "text_status", "image_status", "image_pollution_type")


def read_rows(path: Path) -> Iterator[RegimeRow | InputError]:
    """Evaluated rows of a JSONL file; a bad line is an :class:`InputError` naming the file, line and field."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name}:{n}"
            try:
                yield RegimeRow.model_validate_json(line)
            except ValidationError as e:
                err = e.errors()[0]
                yield InputError(where, ".".join(str(x) for x in err["loc"]) or "row", err["msg"])


def write_rows(rows: Iterable[RegimeRow], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(dumps(r.model_dump(mode="json"), ensure_ascii=False) + "\n")
    return path


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A release CSV (pool, image evidence): its column order and rows as strings."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def write_table(columns: list[str], rows: Iterable[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")  # the release writes \n
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in columns})
    return path


POOL_COLUMNS = ["question_idx", "question", "image_idx", "pollution_type", "original_image_url", "original_alt",
                "polluted_image_url", "polluted_alt", "polluted_image_path", "manipulation_method",
                "manipulation_prompt", "donor_question_idx", "rationale"]
