"""Errors that name the sample and field at fault, so one bad input never hides."""

from __future__ import annotations


class MMAuditError(Exception):
    """Base class for mmaudit errors."""


class InputError(MMAuditError, ValueError):
    """Bad input for one sample: says which sample and which field."""

    def __init__(self, sample_id: str | int | None, field: str, reason: str) -> None:
        self.sample_id = sample_id
        self.field = field
        self.reason = reason
        where = f"sample {sample_id!r}" if sample_id is not None else "input"
        super().__init__(f"{where}, field {field!r}: {reason}")
