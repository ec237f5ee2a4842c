"""The dataset registry: one declaration per task family says how its questions are read, asked and judged.

A task family is what a sample's ``task_family`` names: a real dataset (ChartQA, DocVQA, MME) or a synthetic
family of the zoo. ``@dataset(...)`` on a reader function (or :func:`register` for a family with no files to read)
declares its judge rule (J), the clean-accuracy floor below which the report warns that the evaluation is not
valid, the answer-format instruction its questions are asked with, and whether its images go through the OCR
evidence check (charts and documents, whose text OCR reads); `--data NAME:PATH` then reads ``PATH`` with the
reader. The judge, the loaders, the validity check and the evidence check all read these entries, and modules
that declare datasets are found through the ``mmaudit.datasets`` entry points (:mod:`mmaudit.plugins`), mmaudit's
own as any plugin's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mmaudit.data.sample import Sample
from mmaudit.errors import InputError
from mmaudit.judge.match import RULES
from mmaudit.plugins import Registry

Item = Sample | InputError
DEFAULT_FLOOR = 0.10  # a task family nobody declared: the loosest real-dataset floor


@dataclass(frozen=True)
class Dataset:
    name: str  # the samples' task_family
    judge_rule: str  # J's rule: relaxed (5% numeric tolerance), anls, yesno, exact
    floor: float  # clean accuracy below this makes the report warn that the audit is not valid
    instruction: str = ""  # the answer-format line after each question ('' asks the bare question)
    ocr_evidence: bool = False  # its edited images go through the OCR evidence check
    read: Callable[[str], Iterator[Item]] | None = None  # --data NAME:PATH
    layouts: str = ""  # what PATH may be, for messages and --help

    def __post_init__(self) -> None:
        if self.judge_rule not in RULES:
            raise ValueError(f"dataset {self.name!r}: judge_rule must be one of {RULES}, got {self.judge_rule!r}")


_REGISTRY = Registry("datasets")


def register(entry: Dataset) -> Dataset:
    _REGISTRY.add(entry.name, entry)
    return entry


def dataset(name: str, *, judge_rule: str, floor: float, instruction: str = "", ocr_evidence: bool = False,
            layouts: str = ""):
    """Register the decorated reader (``PATH -> Samples or InputErrors``, one per record) as ``name``'s."""
    return _REGISTRY.decorator(name, lambda read: Dataset(name, judge_rule, floor, instruction, ocr_evidence, read,
                                                          layouts))


def datasets() -> dict[str, Dataset]:
    """Every registered task family (mmaudit's own and installed plugins' imported first)."""
    return _REGISTRY.entries()


def lookup(name: str) -> Dataset | None:
    return datasets().get(name)


def readers() -> dict[str, Dataset]:
    """The task families `--data NAME:PATH` can read."""
    return {k: d for k, d in datasets().items() if d.read is not None}


def judge_rules() -> dict[str, str]:
    return {k: d.judge_rule for k, d in datasets().items()}


def floor(name: str) -> float:
    entry = lookup(name)
    return entry.floor if entry else DEFAULT_FLOOR


def instruction(name: str) -> str:
    entry = lookup(name)
    return entry.instruction if entry else ""


def ocr_evidence(name: str) -> bool:
    entry = lookup(name)
    return bool(entry and entry.ocr_evidence)
