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


class UsageError(MMAuditError, ValueError):
    """A command was asked for something that cannot be had (a missing file, an unknown model or level, a bad
    option value); the message names the thing and the fix, and the command line prints it as one line."""


class RunLocked(MMAuditError):
    """Another live process holds the run folder."""


class FolderError(InputError):
    """Bad input at the level of a whole file or folder (no sample to name): "PATH: reason"."""

    def __init__(self, path, field: str, reason: str) -> None:
        super().__init__(str(path), field, reason)
        Exception.__init__(self, f"{path}: {reason}")


def json_reason(e) -> str:
    """A ``json.JSONDecodeError`` as one readable reason with its column (the line is named by the caller)."""
    at = "" if e.msg.endswith(" at") else " at"
    return f"not valid JSON: {e.msg}{at} column {e.colno}"
