"""ChartQA, DocVQA and MME as users of lmms-eval and VLMEvalKit hold them: the lmms-lab Hugging Face datasets, read
with the ``datasets`` library (extra ``[datasets]``) from a local folder of parquet files, a ``save_to_disk``
folder, or the hub id in the offline cache (``HF_DATASETS_OFFLINE=1``).

Each row becomes the sample the original layout gives for the same question: the same task family (so the same
instruction, judge rule and validity floor), the same image pixels, and the same id where the row carries what
the original id is made of (ChartQA: its split file and index in it, from ``type`` and the row order; DocVQA:
``questionId``; MME: its category, image name and the question's line), so the audit's records are the same
records. Schemas (lmms-lab): ChartQA ``type, question, answer, image``; DocVQA ``questionId, question, answers,
image``; MME ``question_id, category, question, answer, image``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mmaudit.data.sample import Sample
from mmaudit.errors import InputError, UsageError

SPLITS = {"chartqa": "test", "docvqa": "validation", "mme": "test"}
CHARTQA_FILES = {"human_test": "test_human.json", "augmented_test": "test_augmented.json"}


def is_hf_layout(path: str) -> bool:
    """A folder of parquet files, a ``save_to_disk`` folder, a parquet file, or (no such path) a hub id."""
    p = Path(path)
    if p.is_dir():
        return any(p.rglob("*.parquet")) or (p / "dataset_info.json").is_file() or (p / "state.json").is_file()
    hub_id = not p.exists() and path.count("/") == 1 and not path.startswith((".", "/")) and not p.suffix
    return p.suffix == ".parquet" or hub_id  # lmms-lab/ChartQA; a missing file (x/test.json) is not one


def rows(path: str, name: str):
    """The dataset's rows, in file order."""
    try:
        import datasets
    except ImportError:
        raise UsageError(f"--data {name}:{path}: reading the Hugging Face layout needs the datasets library (pip "
                         "install 'mmaudit[datasets]')") from None
    p = Path(path)
    try:
        if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "state.json").is_file()):
            loaded = datasets.load_from_disk(str(p))
            return loaded[SPLITS[name]] if isinstance(loaded, datasets.DatasetDict) else loaded
        if p.exists():
            files = sorted(str(f) for f in (p.rglob("*.parquet") if p.is_dir() else [p]))
            return datasets.load_dataset("parquet", data_files=files, split="train")
        return datasets.load_dataset(path, "DocVQA" if name == "docvqa" else None, split=SPLITS[name])
    except (OSError, ValueError, FileNotFoundError) as e:
        raise UsageError(f"--data {name}:{path}: not a readable Hugging Face dataset ({' '.join(str(e).split())[:200]};"
                         " offline, a hub id is read from the cache only)") from None


def _image(value, sid: str) -> np.ndarray:
    """A row's image (a PIL image, or the parquet struct of bytes and path) as RGB uint8."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        if isinstance(value, dict):
            value = Image.open(io.BytesIO(value["bytes"])) if value.get("bytes") else Image.open(value["path"])
        return np.asarray(value.convert("RGB"))
    except (OSError, KeyError, TypeError, AttributeError, UnidentifiedImageError) as e:
        raise InputError(sid, "image", f"not a readable image ({type(e).__name__})") from None


def read(path: str, name: str, make) -> Iterator[Sample | InputError]:
    """Samples of ``name`` from the HF layout; ``make(sid, image, question, answer, family, meta)`` builds one as
    the original layout's loader does (validation, answer type, instruction)."""
    seen: Counter = Counter()
    for i, row in enumerate(rows(path, name)):
        try:
            if name == "chartqa":
                split = CHARTQA_FILES.get(row.get("type"), f"{row.get('type')}.json")
                sid = f"chartqa:{split}:{seen[split]}"
                seen[split] += 1
                yield make(sid, _image(row.get("image"), sid), row.get("question"), row.get("answer"), name, {})
            elif name == "docvqa":
                sid = f"docvqa:{row.get('questionId', i)}"
                answers = row.get("answers")
                if not isinstance(answers, list) or not answers:
                    raise InputError(sid, "answers", "missing or empty")
                yield make(sid, _image(row.get("image"), sid), row.get("question"), answers[0], name,
                           {"answers": [str(a) for a in answers], "questionId": row.get("questionId")})
            else:
                qid = str(row.get("question_id") or i)
                category = row.get("category") or qid.split("/")[0]
                stem = Path(qid).stem
                seen[qid] += 1
                sid = f"mme:{category}/{stem}:{seen[qid]}"
                yield make(sid, _image(row.get("image"), sid), row.get("question"), row.get("answer"), name,
                           {"category": category})
        except InputError as e:
            yield e
