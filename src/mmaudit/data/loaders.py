"""The paper's datasets from their own on-disk formats: ChartQA, DocVQA, MME, plus the 1,500-question selection.

Each loader yields a :class:`Sample` or an :class:`InputError` per record (the
error names the file, the record and the field), so one bad record is counted
and the rest still load. Images are read lazily from the dataset folder;
nothing is downloaded (``from_hub`` exists for users with network, never used
in tests).

Formats:

* ChartQA: ``<split>/<split>_human.json`` / ``_augmented.json``: a list of
  ``{imgname, query, label}``; images in ``<split>/png/<imgname>``;
* DocVQA: an annotation JSON ``{"data": [{questionId, question, answers,
  image}]}`` with ``image`` relative to the dataset root (``documents/x.png``);
  the first answer is the reference, all of them are kept in ``meta["answers"]``;
* MME: one folder per category, holding either ``images/`` +
  ``questions_answers_YN/`` or image + ``.txt`` pairs side by side; each txt
  line is ``question<TAB>answer`` (Yes/No).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mmaudit.data.io import read_image
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError

Item = Sample | InputError
# The answer-format instruction each source's questions are asked with: the standard evaluation harnesses append
# this line to ChartQA and DocVQA questions (an instruction-tuned VLM otherwise answers in sentences, which relaxed
# accuracy and ANLS score wrong); MME's questions already end with "Please answer yes or no."
TASK_INSTRUCTIONS = {"chartqa": "Answer the question using a single word or phrase.",
                     "docvqa": "Answer the question using a single word or phrase.", "mme": ""}
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def answer_type_of(answer: str) -> str:
    """A bare answer's type: number, yes/no or free text."""
    a = answer.strip().rstrip("%").replace(",", "")
    try:
        float(a)
        return "number"
    except ValueError:
        return "yes/no" if answer.strip().lower() in ("yes", "no") else "free text"


def _sample(sid: str, image_path: Path, question, answer, family: str, meta: dict | None = None) -> Sample:
    if not isinstance(question, str) or not question.strip():
        raise InputError(sid, "question", "missing or empty")
    if answer is None or not str(answer).strip():
        raise InputError(sid, "answer", "missing or empty")
    image = read_image(image_path, sid)
    return Sample(sid, image, question, str(answer), answer_type_of(str(answer)), family, meta=meta or {},
                  instruction=TASK_INSTRUCTIONS.get(family, "")).validate()


def _records(path: Path, key: str | None, field: str, what: str) -> list | InputError:
    """The record list of an annotation file, or the error that names the file."""
    try:
        data = json.loads(path.read_text())
        return data[key] if key else data
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        return InputError(path.name, field, f"{what}: {e}")


def load_chartqa(annotations: Path, image_dir: Path | None = None) -> Iterator[Item]:
    annotations = Path(annotations)
    image_dir = Path(image_dir) if image_dir else annotations.parent / "png"
    records = _records(annotations, None, "file", "not a readable JSON list")
    if isinstance(records, InputError):
        yield records
        return
    for i, r in enumerate(records):
        sid = f"chartqa:{annotations.name}:{i}"
        try:
            if not isinstance(r, dict) or "imgname" not in r:
                raise InputError(sid, "imgname", "missing")
            yield _sample(sid, image_dir / r["imgname"], r.get("query"), r.get("label"), "chartqa",
                          {"imgname": r["imgname"]})
        except InputError as e:
            yield e


def load_docvqa(annotations: Path, root: Path | None = None) -> Iterator[Item]:
    annotations = Path(annotations)
    root = Path(root) if root else annotations.parent
    records = _records(annotations, "data", "data", "not a DocVQA annotation file")
    if isinstance(records, InputError):
        yield records
        return
    for i, r in enumerate(records):
        sid = f"docvqa:{r.get('questionId', i) if isinstance(r, dict) else i}"
        try:
            if not isinstance(r, dict) or "image" not in r:
                raise InputError(sid, "image", "missing")
            answers = r.get("answers")
            if not isinstance(answers, list) or not answers:
                raise InputError(sid, "answers", "missing or empty")
            yield _sample(sid, root / r["image"], r.get("question"), answers[0], "docvqa",
                          {"answers": [str(a) for a in answers], "questionId": r.get("questionId")})
        except InputError as e:
            yield e


def _mme_pairs(category: Path) -> Iterator[tuple[Path, Path | None]]:
    """(txt file, image dir or None) for both MME layouts."""
    qa = category / "questions_answers_YN"
    if qa.is_dir():
        for txt in sorted(qa.glob("*.txt")):
            yield txt, category / "images"
    else:
        for txt in sorted(category.glob("*.txt")):
            yield txt, None


def load_mme(root: Path, categories: list[str] | None = None) -> Iterator[Item]:
    root = Path(root)
    for category in sorted(p for p in root.iterdir() if p.is_dir()):
        if categories and category.name not in categories:
            continue
        for txt, image_dir in _mme_pairs(category):
            base = image_dir or txt.parent
            image = next((base / (txt.stem + ext) for ext in IMAGE_EXTS if (base / (txt.stem + ext)).exists()),
                         base / (txt.stem + ".png"))
            for n, line in enumerate(txt.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                sid = f"mme:{category.name}/{txt.stem}:{n}"
                parts = line.split("\t")
                if len(parts) < 2:
                    yield InputError(sid, "line", "expected 'question<TAB>answer'")
                    continue
                try:
                    yield _sample(sid, image, parts[0].strip(), parts[1].strip(), "mme",
                                  {"category": category.name})
                except InputError as e:
                    yield e


def select_balanced(by_dataset: dict[str, list[Sample]], total: int = 1500, seed: int = 0) -> list[Sample]:
    """The paper's fixed selection: ``total`` questions split evenly over the datasets, drawn by seed.

    Samples are sorted by id before drawing, so the selection depends only on
    the data and the seed; a dataset with too few samples is an error.
    """
    per = total // len(by_dataset)
    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    for name in sorted(by_dataset):
        pool = sorted(by_dataset[name], key=lambda s: s.id)
        if len(pool) < per:
            raise ValueError(f"{name}: {len(pool)} samples, {per} needed for a {total}-question selection")
        idx = np.sort(rng.choice(len(pool), size=per, replace=False))
        out += [pool[i] for i in idx]
    return out


def from_hub(name: str, split: str = "test", limit: int | None = None) -> Iterator[Item]:  # pragma: no cover
    """ChartQA / DocVQA / MME from the Hugging Face hub (needs network and the ``datasets`` package)."""
    from datasets import load_dataset

    specs = {"chartqa": ("HuggingFaceM4/ChartQA", "query", "label"),
             "docvqa": ("lmms-lab/DocVQA", "question", "answers"), "mme": ("lmms-lab/MME", "question", "answer")}
    repo, q_key, a_key = specs[name]
    ds = load_dataset(repo, "DocVQA" if name == "docvqa" else None, split=split)
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        answer = row[a_key][0] if isinstance(row[a_key], list) else row[a_key]
        sid = f"{name}:hub:{i}"
        try:
            image = np.asarray(row["image"].convert("RGB"))
            yield Sample(sid, image, row[q_key], str(answer), answer_type_of(str(answer)), name).validate()
        except InputError as e:
            yield e
