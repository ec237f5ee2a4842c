"""The run store: one JSON line per finished unit of work, keyed by a hash of its inputs.

Append-only and crash-safe: a group of records is written in one call and
fsync'd, and a torn last line (a kill mid-write) is ignored on reopening, so the
unit it belonged to is simply recomputed. A rerun with the same command skips
every key already present; reports are rebuilt from this file alone.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from mmaudit.jsonout import dumps


def key_of(**parts) -> str:
    """Content hash of everything that determines a result."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class RunStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict] = {}
        self.torn_lines = 0
        self._needs_newline = False
        if self.path.exists():
            text = self.path.read_text()
            self._needs_newline = bool(text) and not text.endswith("\n")
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    self.torn_lines += 1
                    continue
                self._records.setdefault(rec["key"], rec)

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def records(self, kind: str | None = None) -> Iterator[dict]:
        for rec in self._records.values():
            if kind is None or rec.get("kind") == kind:
                yield rec

    def put_many(self, records: Iterable[dict]) -> None:
        new = [r for r in records if r["key"] not in self._records]
        if not new:
            return
        data = "".join(dumps(r, sort_keys=True) + "\n" for r in new)
        with self.path.open("a") as f:
            if self._needs_newline:
                f.write("\n")  # a torn last line never glues onto a good one
                self._needs_newline = False
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for r in new:
            self._records[r["key"]] = r

    def put(self, record: dict) -> None:
        self.put_many([record])
