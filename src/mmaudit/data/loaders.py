"""The paper's datasets from their own on-disk formats: ChartQA, DocVQA, MME, plus the 1,500-question selection.

Each loader yields a :class:`Sample` or an :class:`InputError` per record (the
error names the file, the record and the field), so one bad record is counted
and the rest still load. Images are read lazily from the dataset folder;
nothing is downloaded. Each dataset is declared in the dataset registry
(:mod:`mmaudit.data.datasets`: its instruction, judge rule, validity floor and
OCR evidence check) with one reader that takes the original layout below or the
lmms-lab Hugging Face layout (:mod:`mmaudit.data.hf_layouts`).

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

from mmaudit.data import datasets
from mmaudit.data.datasets import dataset
from mmaudit.data.io import read_image
from mmaudit.data.sample import Sample
from mmaudit.errors import InputError, UsageError

Item = Sample | InputError
ASK_SHORT = "Answer the question using a single word or phrase."
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def answer_type_of(answer: str) -> str:
    """A bare answer's type: number, yes/no or free text."""
    a = answer.strip().rstrip("%").replace(",", "")
    try:
        float(a)
        return "number"
    except ValueError:
        return "yes/no" if answer.strip().lower() in ("yes", "no") else "free text"


def _check_text(sid: str, question, answer) -> None:
    if not isinstance(question, str) or not question.strip():
        raise InputError(sid, "question", "missing or empty")
    if answer is None or not str(answer).strip():
        raise InputError(sid, "answer", "missing or empty")


def _sample(sid: str, image_path: Path, question, answer, family: str, meta: dict | None = None) -> Sample:
    _check_text(sid, question, answer)  # before the image is read: a bad record costs no file read
    return make_sample(sid, read_image(image_path, sid), question, answer, family, meta)


def make_sample(sid: str, image: np.ndarray, question, answer, family: str, meta: dict | None = None) -> Sample:
    """A validated sample of a registered dataset, asked with its instruction (every layout builds it here)."""
    _check_text(sid, question, answer)
    return Sample(sid, image, question, str(answer), answer_type_of(str(answer)), family, meta=meta or {},
                  instruction=datasets.instruction(family)).validate()


def _either(name: str, path: str, original) -> Iterator[Item]:
    """The lmms-lab Hugging Face layout where ``path`` is one (:mod:`mmaudit.data.hf_layouts`), else the original."""
    from mmaudit.data import hf_layouts

    if hf_layouts.is_hf_layout(path):
        yield from hf_layouts.read(path, name, make_sample)
        return
    if not Path(path).exists():
        raise UsageError(f"--data {name}:{path}: no such file or folder ({datasets.lookup(name).layouts})")
    yield from original(Path(path))


# ChartQA and DocVQA: the standard evaluation harnesses append the short-answer line (an instruction-tuned VLM
# otherwise answers in sentences, which relaxed accuracy and ANLS score wrong); MME's questions already end with
# "Please answer yes or no." Floors: no correctly set-up model of the paper's range (2-12B, instruction-tuned)
# scores below them; MME is yes/no, so its floor sits just above chance.
@dataset("chartqa", judge_rule="relaxed", floor=0.10, instruction=ASK_SHORT, ocr_evidence=True,
         layouts="the original test/test_human.json (images in png/ beside it), or the lmms-lab/ChartQA dataset")
def read_chartqa(path: str) -> Iterator[Item]:
    yield from _either("chartqa", path, load_chartqa)


@dataset("docvqa", judge_rule="anls", floor=0.10, instruction=ASK_SHORT, ocr_evidence=True,
         layouts="the original val_v1.0.json (images relative to it), or the lmms-lab/DocVQA dataset")
def read_docvqa(path: str) -> Iterator[Item]:
    yield from _either("docvqa", path, load_docvqa)


@dataset("mme", judge_rule="yesno", floor=0.55,
         layouts="the original MME_Benchmark folder (per-category folders), or the lmms-lab/MME dataset")
def read_mme(path: str) -> Iterator[Item]:
    yield from _either("mme", path, load_mme)


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
