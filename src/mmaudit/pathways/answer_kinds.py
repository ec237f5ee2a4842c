"""What kind of answer a reference is, and candidates of the same kind and form.

Real VQA labels are not only bare integers: ChartQA holds decimals, percentages,
years and legend entries; DocVQA dates, times, money, quantities with units and
names. A task-matching wrong answer keeps the kind *and* the written form (the
digits, separators, currency, unit and case of the reference), so "12/05/2019"
becomes another date written the same way and a year stays a year. The judge
decides which candidate is wrong; this module only proposes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

KINDS = ("yes/no", "year", "date", "time", "percentage", "money", "unit", "integer", "decimal", "text")
NUMERIC_KINDS = ("year", "date", "time", "percentage", "money", "unit", "integer", "decimal")

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
MONTHS_SHORT = tuple(m[:3] for m in MONTHS)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
COLOURS = ("red", "green", "blue", "yellow", "black", "white", "orange", "purple", "pink", "brown", "grey", "gray")
CONTINENTS = ("Africa", "Asia", "Europe", "North America", "South America", "Oceania", "Antarctica")
COUNTRIES = (
    "Afghanistan", "Algeria", "Argentina", "Australia", "Austria", "Bangladesh", "Belgium", "Bolivia", "Brazil",
    "Bulgaria", "Cambodia", "Cameroon", "Canada", "Chile", "China", "Colombia", "Croatia", "Cuba", "Czechia",
    "Denmark", "Ecuador", "Egypt", "Ethiopia", "Finland", "France", "Germany", "Ghana", "Greece", "Guatemala",
    "Hungary", "Iceland", "India", "Indonesia", "Iran", "Iraq", "Ireland", "Israel", "Italy", "Jamaica", "Japan",
    "Jordan", "Kazakhstan", "Kenya", "Kuwait", "Lebanon", "Malaysia", "Mexico", "Morocco", "Nepal", "Netherlands",
    "New Zealand", "Nigeria", "Norway", "Pakistan", "Peru", "Philippines", "Poland", "Portugal", "Qatar",
    "Romania", "Russia", "Saudi Arabia", "Serbia", "Singapore", "Slovakia", "South Africa", "South Korea", "Spain",
    "Sri Lanka", "Sweden", "Switzerland", "Syria", "Taiwan", "Tanzania", "Thailand", "Tunisia", "Turkey", "Uganda",
    "Ukraine", "United Arab Emirates", "United Kingdom", "United States", "Uruguay", "Venezuela", "Vietnam",
    "Yemen", "Zambia", "Zimbabwe", "UK", "USA", "U.S.", "EU",
)
# Closed classes: a member is replaced by another member of its class ("a country for a country").
CLASSES: dict[str, tuple[str, ...]] = {"month": MONTHS, "month (short)": MONTHS_SHORT, "weekday": WEEKDAYS,
                                       "colour": COLOURS, "continent": CONTINENTS, "country": COUNTRIES}

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_CUR_PRE = r"(?:US\$|\$|€|£|¥|₹|Rs\.?\s?|USD\s?|EUR\s?|GBP\s?|INR\s?)"
_CUR_POST = r"(?:USD|EUR|GBP|INR|dollars?|euros?|pounds?|rupees?|yen)"
_SCALE = r"(?:million|billion|trillion|thousand|mn|bn|k|m|b)"
_AMPM = r"(?:[ap]\.?m\.?)"
_MONTH_RE = "|".join(sorted(MONTHS + MONTHS_SHORT, key=len, reverse=True))

PATTERNS: dict[str, re.Pattern] = {
    "year": re.compile(r"^(?:1[0-9]{3}|20[0-9]{2}|2100)$"),
    "date": re.compile(
        rf"^(?:\d{{1,2}}[/.-]\d{{1,2}}[/.-]\d{{2,4}}|\d{{4}}-\d{{1,2}}-\d{{1,2}}"
        rf"|(?:{_MONTH_RE})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s*(?:\d{{4}})?"
        rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH_RE})\.?,?\s*(?:\d{{4}})?"
        rf"|(?:{_MONTH_RE})\.?,?\s+\d{{4}})$", re.I),
    "time": re.compile(rf"^(?:\d{{1,2}}:\d{{2}}(?::\d{{2}})?\s*{_AMPM}?|\d{{1,2}}\s*{_AMPM})$", re.I),
    "percentage": re.compile(rf"^[-+]?(?:{_NUM})\s*(?:%|percent|per cent)$", re.I),
    "money": re.compile(rf"^[-+]?(?:{_CUR_PRE}\s*(?:{_NUM})\s*{_SCALE}?\.?|(?:{_NUM})\s*{_SCALE}?\s*{_CUR_POST})$",
                       re.I),
    "integer": re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)$"),
    "decimal": re.compile(rf"^[-+]?(?:{_NUM})$"),
    "unit": re.compile(rf"^[-+]?(?:{_NUM})\s*[A-Za-z°µ/²³][A-Za-z°µ/²³.]*(?:\s+[A-Za-z][A-Za-z.]*){{0,2}}$"),
}
_NUMBER_IN = re.compile(_NUM)


def answer_kind(ref: str) -> str:
    """The kind of a reference answer (one of :data:`KINDS`)."""
    r = " ".join(str(ref).split())
    if r.lower().rstrip(".!") in ("yes", "no"):
        return "yes/no"
    for kind in ("year", "date", "time", "percentage", "money", "integer", "decimal", "unit"):
        if PATTERNS[kind].match(r):
            return kind
    return "text"


def closed_class(ref: str) -> str | None:
    """The closed class (country, month, colour, ...) ``ref`` belongs to, if any."""
    low = " ".join(ref.split()).lower().rstrip(".")
    for name, members in CLASSES.items():
        if any(low == m.lower() for m in members):
            return name
    return None


def match_case(candidate: str, ref: str) -> str:
    """Write ``candidate`` in the case pattern of ``ref`` (upper, lower, title; else as it is)."""
    if ref.isupper() and any(c.isalpha() for c in ref):
        return candidate.upper()
    if ref.islower():
        return candidate.lower()
    if ref.istitle() and not candidate.isupper():
        return candidate.title() if candidate.islower() else candidate
    return candidate


# ----------------------------------------------------------------------------- numbers in their written form


def _digits_like(token: str, value: float) -> str:
    """``value`` written like ``token``: its decimals, its thousands commas, no leading zeros added."""
    dec = len(token.split(".")[1]) if "." in token else 0
    text = f"{abs(value):,.{dec}f}" if "," in token else f"{abs(value):.{dec}f}"
    if token.startswith(".") and text.startswith("0."):
        text = text[1:]
    return text


def _new_value(token: str, rng: np.random.Generator, strength: int) -> float:
    """Another plausible magnitude for a number token: a factor away, with as many integer digits and the
    same round-ness (500 -> 300, never 5000)."""
    value = float(token.replace(",", ""))
    whole = token.split(".")[0].replace(",", "")
    if value == 0:
        return float(rng.integers(1, 10)) / (10 ** (len(token.split(".")[1]) if "." in token else 0))
    if "." not in token and len(whole) == 1:
        return float(rng.choice([d for d in range(10) if d != int(value)]))
    zeros = len(whole) - len(whole.rstrip("0")) if "." not in token else 0
    spread = 0.5 * (1 + strength)
    for _ in range(50):
        factor = float(np.exp(rng.uniform(-spread, spread)))
        new = value * factor
        if zeros:
            step = 10**zeros
            new = round(new / step) * step
        if "." not in token:
            new = round(new)
        same_width = len(str(int(abs(new)))) == len(whole.lstrip("-+")) or whole in ("0", "")
        if abs(new - value) / abs(value) > 0.06 and new > 0 and same_width:  # as many digits: 8170 -> 5360
            return new
    return value * 0.5 if value >= 2 * 10 ** (len(whole) - 1) else value * 1.5


def replace_numbers(ref: str, rng: np.random.Generator, strength: int = 0) -> str:
    """Every number in ``ref`` replaced by another of the same form; the rest of the text kept."""
    def sub(m: re.Match) -> str:
        return _digits_like(m.group(0), _new_value(m.group(0), rng, strength))

    return _NUMBER_IN.sub(sub, ref)


def _year(ref: str, rng: np.random.Generator, strength: int) -> str:
    value = int(ref)
    span = 5 * (1 + strength)
    for _ in range(50):
        new = value + int(rng.choice([-1, 1])) * int(rng.integers(1, span + 1))
        if 1000 <= new <= 2100 and new != value:
            return str(new)
    return str(value - 1)


def _pad(new: int, old: str, two_digits: bool = False) -> str:
    """``new`` zero-padded as ``old`` is ("05" -> "08", "5" -> "8"; ``two_digits``: always two)."""
    return str(new).zfill(len(old)) if old.startswith("0") or two_digits else str(new)


def _date(ref: str, rng: np.random.Generator, strength: int) -> str:
    """Another date written the same way: a new day, and (stronger) a new month and year."""
    parts = re.split(r"(\d+|[A-Za-z]+)", ref)
    months = [i for i, p in enumerate(parts) if p.lower().rstrip(".") in {m.lower() for m in MONTHS + MONTHS_SHORT}]
    nums = [i for i, p in enumerate(parts) if p.isdigit()]
    years = [i for i in nums if len(parts[i]) == 4]
    small = [i for i in nums if len(parts[i]) <= 2]
    # zero-padded dates ("05/12/2019", "2019-05-12"); "12 May 2019" says nothing about padding
    padded = any(parts[i].startswith("0") for i in small) or len(small) > 1 and all(len(parts[i]) == 2 for i in small)
    if not months and len(small) == 2:  # dd/mm/yy(yy) or mm/dd/yy(yy): ambiguous order, keep both plausible
        for i in small:
            parts[i] = _pad(int(rng.integers(1, 13)), parts[i], padded)
        if not years and len(nums) == 3:  # a two-digit year
            parts[nums[-1]] = _pad(int(rng.integers(0, 100)), parts[nums[-1]], True)
    else:
        for i in small:
            parts[i] = _pad(int(rng.integers(1, 29)), parts[i], padded)
        if months and (strength or not small):
            names = MONTHS if parts[months[0]].rstrip(".").title() in MONTHS else MONTHS_SHORT
            parts[months[0]] = match_case(str(rng.choice([m for m in names if m.lower() != parts[months[0]].lower()])),
                                          parts[months[0]])
    if years and (strength or len(nums) == len(years)):
        parts[years[0]] = _year(parts[years[0]], rng, strength)
    return "".join(parts)


def _time(ref: str, rng: np.random.Generator, strength: int) -> str:
    ampm = bool(re.search(_AMPM, ref, re.I))
    fields = re.split(r"(\d+)", ref)
    nums = [i for i, p in enumerate(fields) if p.isdigit()]
    hour = int(rng.integers(1, 13)) if ampm else int(rng.integers(0, 24))
    fields[nums[0]] = _pad(hour, fields[nums[0]], not ampm and len(fields[nums[0]]) == 2)
    for i in nums[1:]:
        step = 5 if int(fields[i]) % 5 == 0 else 1
        fields[i] = f"{int(rng.integers(0, 60 // step)) * step:02d}"
    out = "".join(fields)
    if ampm and strength:  # morning for afternoon: what a lenient string judge still tells apart
        out = re.sub(r"([aApP])(\.?[mM])", lambda m: {"a": "p", "p": "a", "A": "P", "P": "A"}[m[1]] + m[2], out)
    return out


def candidates(ref: str, kind: str, rng: np.random.Generator, n: int = 200) -> Iterator[str]:
    """Candidates of ``kind`` written like ``ref``, getting further from it as they go (for a lenient judge)."""
    for i in range(n):
        strength = i * 3 // n
        if kind == "year":
            yield _year(ref, rng, strength)
        elif kind == "date":
            yield _date(ref, rng, strength)
        elif kind == "time":
            yield _time(ref, rng, strength)
        else:  # integer, decimal, percentage, money, unit: the digits change, the form stays
            yield replace_numbers(ref, rng, strength)
