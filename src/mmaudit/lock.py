"""One process per run folder: an exclusive lock on ``<run>/.lock`` for as long as a command writes there.

Two commands on one folder would each compute everything and append every record twice. The lock is an
``flock`` on the lock file, which the kernel releases when its holder exits or is killed, so a lock left by a
killed process is simply taken over by the next command (the file still names the old holder, and says so).
The file records who holds it: pid, host, command, since when.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from mmaudit.errors import RunLocked

try:  # POSIX; elsewhere the folder is not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """``with RunLock(folder, "audit"):`` ... ; ``wait=True`` waits for the holder instead of refusing."""

    def __init__(self, folder: Path, command: str, wait: bool = False) -> None:
        self.path = Path(folder) / ".lock"
        self.command, self.wait = command, wait
        self.previous: dict | None = None  # the holder named in the file when this process took the lock over
        self._file = None

    def holder(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")  # noqa: SIM115 - held for the lock's lifetime
        if fcntl is not None:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                h = self.holder()
                if not self.wait:
                    self._file.close()
                    raise RunLocked(f"{self.path.parent} is in use by process {h.get('pid', '?')} on "
                                    f"{h.get('host', '?')} ({h.get('command', '?')}, since {h.get('since', '?')}); "
                                    "wait for it to finish, or rerun with --wait") from None
                fcntl.flock(self._file, fcntl.LOCK_EX)
        old = self.holder()
        stale = old.get("pid") and old.get("host") == socket.gethostname() and not alive(int(old["pid"]))
        if stale:
            self.previous = old  # a killed process's lock, taken over
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                                     "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        self._file.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            if fcntl is not None:
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
