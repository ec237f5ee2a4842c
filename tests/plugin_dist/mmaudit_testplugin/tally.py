"""A dataset from a plugin: ``tally`` folders hold ``questions.tsv`` (image file, question, answer per line) and the
images; asked with a short-answer line, judged by exact match, OCR-checked, with its own validity floor. Read as
`--data tp_tally:FOLDER`."""

from __future__ import annotations

from pathlib import Path

from mmaudit.data.datasets import dataset
from mmaudit.data.io import read_image
from mmaudit.data.loaders import make_sample
from mmaudit.errors import InputError, UsageError


@dataset("tp_tally", judge_rule="exact", floor=0.2, instruction="Answer with the number only.", ocr_evidence=True,
         layouts="a folder with questions.tsv and its images")
def read_tally(path: str):
    table = Path(path) / "questions.tsv"
    if not table.is_file():
        raise UsageError(f"--data tp_tally:{path}: no questions.tsv in that folder")
    for n, line in enumerate(table.read_text().splitlines(), 1):
        sid = f"tp_tally:{n}"
        parts = line.split("\t")
        if len(parts) != 3:
            yield InputError(sid, "line", "expected image<TAB>question<TAB>answer")
            continue
        try:
            yield make_sample(sid, read_image(Path(path) / parts[0], sid), parts[1], parts[2], "tp_tally")
        except InputError as e:
            yield e
