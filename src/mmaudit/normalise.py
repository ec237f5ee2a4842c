"""Every text normaliser in one place, each named for the rule it applies (the rules differ on purpose: J's
matching, the zoo's exact match and the QIMG-7 release's readings are each specified as they are)."""

from __future__ import annotations

import re


def spaced(text) -> str:
    """Lower case, surrounding and repeated whitespace collapsed (the zoo's exact match)."""
    return " ".join(str(text).strip().lower().split())


def answer(text) -> str:
    """J's reading of an answer: :func:`spaced`, then a trailing full stop, exclamation or question mark dropped."""
    return spaced(text).rstrip(".!?").strip()


def words(text) -> list[str]:
    """The word tokens of :func:`answer` (letters and digits; punctuation and underscores split)."""
    return re.findall(r"[^\W_]+", answer(text))


def alnum(text) -> str:
    """Lower-cased alphanumeric runs joined by single spaces (the release's Answer-Consensus similarity)."""
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9]+", " ", str(text or "").lower())).strip()


def lowered(value) -> str:
    """The release's reading of a reliability value: ``str(x or "").strip().lower()``."""
    return str(value or "").strip().lower()
