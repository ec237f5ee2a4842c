"""Answer judges: deterministic matching J for the audit (LLM judges live beside it later)."""

from mmaudit.judge.match import Judge, anls, exact_match, normalise, relaxed_match, yes_no_match

__all__ = ["Judge", "anls", "exact_match", "normalise", "relaxed_match", "yes_no_match"]
