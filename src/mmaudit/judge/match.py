"""The answer judge J of FusionAudit.

The paper leaves J unstated; mmaudit uses each source dataset's own metric,
binarised, which is what a reader of ChartQA, DocVQA and MME results expects:

* ``relaxed``: ChartQA's relaxed accuracy: numbers within 5% of the reference
  (relative), anything else by normalised exact match; four-digit years
  (1000-2100) are compared exactly, since 5% of a year is a century;
* ``anls``: DocVQA's ANLS with threshold 0.5: correct iff the normalised
  Levenshtein distance to some reference is below 0.5; where the reference
  holds numbers ("4217", "$1,200", "12/05/2019", "£5 million"), the answer must
  also hold the same numbers, by value and in order (``numeric_exact``), since
  ANLS alone accepts "4218" for "4217" and "£8 million" for "£5 million"; a bare
  number then needs no ANLS ("4,217" for "4217");
* ``yesno``: MME: the first word of the answer, yes or no;
* ``exact``: normalised exact match (lower case, collapsed spaces, no final
  punctuation).

:class:`Judge` picks a rule per dataset and falls back on the answer type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mmaudit.normalise import answer as normalise

RULES = ("exact", "relaxed", "anls", "yesno")
_NUM = re.compile(r"^[-+]?\$?(\d+(?:[.,]\d+)*)(%?)$")
_NUMBERS_IN = re.compile(r"\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> list[float]:
    """The numbers written in ``text``, in order, by value ("1,234.5" -> 1234.5; "05" -> 5)."""
    out = []
    for tok in _NUMBERS_IN.findall(str(text)):
        try:
            out.append(float(tok.replace(",", "")))
        except ValueError:
            continue
    return out


def exact_match(pred: str, ref: str) -> bool:
    return normalise(pred) == normalise(ref)


def parse_number(text: str) -> float | None:
    m = _NUM.match(normalise(text).replace(" ", ""))
    if not m:
        return None
    try:
        return float(m.group(1).replace(",", ""))
    except ValueError:
        return None


def relaxed_match(pred: str, ref: str, tolerance: float = 0.05) -> bool:
    p, r = parse_number(pred), parse_number(ref)
    if r is not None and r.is_integer() and 1000 <= r <= 2100 and len(normalise(ref)) == 4:
        return p == r  # a year
    if p is not None and r is not None:
        if r == 0:
            return p == 0
        return abs(p - r) / abs(r) <= tolerance
    return exact_match(pred, ref)


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(pred: str, refs: str | list[str], threshold: float = 0.5) -> float:
    """ANLS score of one prediction (max over references), 0 where distance >= threshold."""
    refs = [refs] if isinstance(refs, str) else refs
    best = 0.0
    p = normalise(pred)
    for ref in refs:
        r = normalise(ref)
        nl = levenshtein(p, r) / max(len(p), len(r), 1)
        best = max(best, 1.0 - nl if nl < threshold else 0.0)
    return best


def yes_no_match(pred: str, ref: str) -> bool:
    words = re.findall(r"[a-z]+", normalise(pred))
    return bool(words) and words[0] == normalise(ref)


def declared_rules() -> dict[str, str]:
    """Each registered dataset's rule (:mod:`mmaudit.data.datasets`; imported here, not above: it reads RULES)."""
    from mmaudit.data.datasets import judge_rules

    return judge_rules()


@dataclass
class Judge:
    """J: is ``pred`` a correct answer to a question whose reference is ``ref``?"""

    by_dataset: dict[str, str] = field(default_factory=lambda: declared_rules())  # each dataset's declared rule
    by_type: dict[str, str] = field(default_factory=lambda: {"yes/no": "yesno"})
    default: str = "exact"
    relaxed_tolerance: float = 0.05
    anls_threshold: float = 0.5
    numeric_exact: bool = True  # ANLS rule: numeric references must match as numbers

    def rule(self, dataset: str, answer_type: str) -> str:
        if answer_type in self.by_type:
            return self.by_type[answer_type]
        return self.by_dataset.get(dataset, self.default)

    def correct(self, pred: str, sample) -> bool:
        """J on a sample: against every reference it carries (DocVQA lists several)."""
        return self(pred, sample.references, sample.task_family, sample.answer_type)

    def __call__(self, pred: str, ref: str | list[str] | tuple[str, ...], dataset: str = "",
                 answer_type: str = "free text") -> bool:
        if not isinstance(ref, str):  # several references: correct if it matches any (ANLS takes the max)
            return any(self(pred, r, dataset, answer_type) for r in ref)
        rule = self.rule(dataset, answer_type)
        if rule == "relaxed":
            return relaxed_match(pred, ref, self.relaxed_tolerance)
        if rule == "anls":
            if self.numeric_exact and _NUMBERS_IN.search(ref):
                if numbers_in(pred) != numbers_in(ref):
                    return False
                value = parse_number(ref)
                if value is not None and parse_number(pred) == value:
                    return True
            return anls(pred, ref, self.anls_threshold) > 0.0
        if rule == "yesno":
            return yes_no_match(pred, ref)
        if rule == "exact":
            return exact_match(pred, ref)
        raise ValueError(f"unknown judge rule {rule!r}; choose from {RULES}")
