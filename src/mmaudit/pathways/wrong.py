"""Task-matching wrong answers, shared by MANTIS and the rendered-text attacks.

A wrong answer is of the reference's kind and written in its form, deterministic
by sample, and judged incorrect by J (every candidate is checked against it):

* yes/no: the other one;
* numbers (integers, decimals, percentages, years, dates, times, money, units):
  the digits change, the form stays (``answer_kinds``); a year stays a year;
* text: a member of the same closed class (a country for a country, a month for
  a month); else another entry of the image's own text in the same role when
  the reference is one of them (a legend entry for a legend entry; layout
  metadata, else OCR); else another answer of the same dataset, of the same
  shape, given to the most similar questions (the loaded file's vocabulary);
  else shape-alike text of the image; else any other textual answer of the
  dataset, the nearest in word count first (a label that mixes words and
  numbers, "Democrat (scores 60 to 100)", draws another label), else text of the
  image of a similar length; random letters only where neither offers anything,
  and then said (``source="random"``).

:func:`assign_wrong_answers` fixes every sample's wrong answer once, from the
vocabulary of all loaded samples, in ``sample.meta``; the attacks read it there,
and the store keys of the attacks that use it include it.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.normalise import answer as normalise
from mmaudit.normalise import words
from mmaudit.pathways.answer_kinds import CLASSES, NUMERIC_KINDS, answer_kind, candidates, closed_class, match_case

SOURCES = ("rule", "class", "image", "vocabulary", "image (shape)", "vocabulary (any shape)", "image (any)",
           "random")
_STOP = set("a an the of in on at to for by with from is are was were be been what which who whom whose how many "
            "much does do did this that these those there it its as and or per according image chart graph figure "
            "document shown given value name".split())
OcrReader = Callable[[np.ndarray], list[str]]


class NoWrongAnswer(ValueError):
    """No candidate of the same form that J judges incorrect."""


@dataclass(frozen=True)
class WrongAnswer:
    text: str
    kind: str  # the reference's kind (answer_kinds.KINDS)
    source: str  # where the text came from (SOURCES)


def _rng(*keys: str) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(k.encode()) for k in keys])


def _content(question: str) -> set[str]:
    return {w for w in words(question) if w not in _STOP and not w.isdigit()}


def _similar_length(candidate: str, ref: str) -> bool:
    return 0.4 <= len(candidate) / max(len(ref), 1) <= 2.5


def _same_shape(candidate: str, ref: str) -> bool:
    """Text of the same shape: textual, about as many words, not wildly longer or shorter."""
    c, r = candidate.split(), ref.split()
    if not c or answer_kind(candidate) != "text" or abs(len(c) - len(r)) > 1:
        return False
    return _similar_length(candidate, ref)


class Vocabulary:
    """One dataset's textual answers, each with the questions it answers (for 'same kind' by question)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self.questions: dict[str, set[str]] = defaultdict(set)
        for answer, question in pairs:
            a = " ".join(str(answer).split())
            if a and answer_kind(a) == "text":
                self.questions[a] |= _content(question)

    @classmethod
    def by_dataset(cls, samples: Iterable[Sample]) -> dict[str, Vocabulary]:
        pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for s in samples:
            pairs[s.task_family] += [(r, s.question) for r in s.references]
        return {family: cls(p) for family, p in pairs.items()}

    def __len__(self) -> int:
        return len(self.questions)

    def tiers(self, ref: str, question: str) -> list[list[str]]:
        """Same-shape answers grouped by how many content words their questions share with ``question``,
        most first ("the company" answers for a company question)."""
        q = _content(question)
        groups: dict[int, list[str]] = defaultdict(list)
        for a in self.questions:
            if _same_shape(a, ref):
                groups[len(q & self.questions[a])].append(a)
        return [sorted(groups[k]) for k in sorted(groups, reverse=True)]

    def nearest(self, ref: str) -> list[list[str]]:
        """Every other textual answer, grouped by how far its word count is from ``ref``'s, nearest first."""
        n = len(ref.split())
        groups: dict[int, list[str]] = defaultdict(list)
        for a in self.questions:
            groups[abs(len(a.split()) - n)].append(a)
        return [sorted(groups[k]) for k in sorted(groups)]


def image_texts(sample: Sample, ocr: OcrReader | None = None) -> tuple[list[str], list[str]]:
    """(siblings, others): text of the image in the reference's own role when the reference is shown in it
    (legend entries, axis labels, field names), and the rest of the image's text."""
    ref = normalise(sample.answer)
    if sample.layout is not None:
        texts = [(t.text, t.role) for t in sample.layout.texts]
        roles = {role for text, role in texts if normalise(text) == ref}
        if not roles and sample.answer_type == "label":
            roles = {"label"}
        siblings = [text for text, role in texts if role in roles]
        return siblings, [text for text, role in texts if role not in roles]
    if ocr is None:
        return [], []
    lines = [" ".join(x.split()) for x in ocr(sample.image) if x.strip()]
    shown = any(normalise(x) == ref for x in lines)
    return (lines, []) if shown else ([], lines)


def _pick(pool: Sequence[str], rng: np.random.Generator) -> str:
    return pool[int(rng.integers(len(pool)))]


def choose_wrong(
    sample: Sample,
    judge: Judge | None = None,
    vocabulary: Vocabulary | Sequence[str] | None = None,
    ocr: OcrReader | None = None,
    salt: str = "",
) -> WrongAnswer:
    """The wrong answer of ``sample`` and where it came from (see the module docstring for the order)."""
    judge = judge or Judge()
    ref = " ".join(sample.answer.split())
    kind = answer_kind(ref)
    rng = _rng(ref, sample.id, salt)
    if not isinstance(vocabulary, Vocabulary):
        vocabulary = Vocabulary((a, "") for a in vocabulary or [])

    def wrong(c: str) -> bool:
        return bool(c.strip()) and normalise(c) != normalise(ref) and not judge(
            c, sample.references, sample.task_family, sample.answer_type)

    def first(pool: Iterable[str]) -> str | None:
        ok = sorted({match_case(c, ref) for c in pool if wrong(match_case(c, ref))})
        return _pick(ok, rng) if ok else None

    if kind == "yes/no" or sample.answer_type == "yes/no":
        low = ref.lower()
        flipped = "yes" if low.startswith("no") else "no"
        return WrongAnswer(flipped.capitalize() if ref[:1].isupper() else flipped, "yes/no", "rule")
    if kind in NUMERIC_KINDS:
        for c in candidates(ref, kind, rng):
            if wrong(c):
                return WrongAnswer(c, kind, "rule")
        raise NoWrongAnswer(f"sample {sample.id!r}: no {kind} written like {ref!r} is judged incorrect")
    cls = closed_class(ref)
    siblings, others = image_texts(sample, ocr)
    if cls is not None:
        members = {m.lower() for m in CLASSES[cls]}
        shown = [t for t in siblings + others if t.lower() in members]
        known = [a for a in vocabulary.questions if a.lower() in members]
        for pool in (shown, known, CLASSES[cls]):
            if (w := first(pool)) is not None:
                return WrongAnswer(w, f"text ({cls})", "class")
    if (w := first(s for s in siblings if _same_shape(s, ref) or sample.layout is not None)) is not None:
        return WrongAnswer(w, "text", "image")
    for tier in vocabulary.tiers(ref, sample.question):
        if (w := first(tier)) is not None:
            return WrongAnswer(w, "text", "vocabulary")
    if (w := first(s for s in others if _same_shape(s, ref))) is not None:
        return WrongAnswer(w, "text", "image (shape)")
    for tier in vocabulary.nearest(ref):
        if (w := first(tier)) is not None:
            return WrongAnswer(w, "text", "vocabulary (any shape)")
    if (w := first(s for s in siblings + others if answer_kind(s) == "text" and _similar_length(s, ref))) is not None:
        return WrongAnswer(w, "text", "image (any)")
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ref.isupper() or not ref.isalpha() else "abcdefghijklmnopqrstuvwxyz"
    alphabet = list(letters + ("0123456789" if any(c.isdigit() for c in ref) else ""))
    for _ in range(200):
        c = "".join(" " if ch == " " else str(rng.choice(alphabet)) for ch in ref)
        if wrong(c):
            return WrongAnswer(c, "text", "random")
    raise NoWrongAnswer(f"sample {sample.id!r}: no wrong answer found for {ref!r}")


def wrong_answer(sample: Sample, judge: Judge | None = None, vocabulary: Sequence[str] | None = None,
                 salt: str = "") -> str:
    """The sample's wrong answer: the one fixed by :func:`assign_wrong_answers`, else chosen now."""
    if "wrong_answer" in sample.meta and not salt and vocabulary is None:
        return sample.meta["wrong_answer"]
    return choose_wrong(sample, judge, vocabulary, salt=salt).text


def default_ocr() -> OcrReader | None:
    from mmaudit.pathways.text.ocr import ocr_available, read_lines

    return (lambda image: [ln.text for ln in read_lines(image)]) if ocr_available() else None


def assign_wrong_answers(samples: Sequence[Sample], judge: Judge | None = None, ocr: OcrReader | None = None,
                         vocabulary_from: Iterable[Sample] | None = None) -> list[str]:
    """Fix each sample's wrong answer in ``meta`` (``wrong_answer``, ``wrong_kind``, ``wrong_source``).

    The vocabulary is that of ``vocabulary_from`` (default: ``samples``), per
    dataset, so a selection draws on the whole loaded file. Samples that already
    carry one keep it. Returns the ids of samples with no wrong answer (their
    attacks then report the reason).
    """
    vocab = Vocabulary.by_dataset(vocabulary_from if vocabulary_from is not None else samples)
    missing = []
    for s in samples:
        if "wrong_answer" in s.meta:
            continue
        try:
            w = choose_wrong(s, judge, vocab.get(s.task_family), ocr)
        except NoWrongAnswer:
            missing.append(s.id)
            continue
        s.meta.update(wrong_answer=w.text, wrong_kind=w.kind, wrong_source=w.source)
    return missing


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first token where two token sequences differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) == len(b):
        raise ValueError("sequences are identical: no divergent token")
    return min(len(a), len(b))
