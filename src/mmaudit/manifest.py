"""What a run was: the command's parameters, seed, versions and timing, kept in the run's own store so a
report (``mmaudit report RUN``) is rebuilt from the run folder alone. A resumed run adds one record per
invocation; the report shows the latest one's parameters and every invocation's timing."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from mmaudit.store import RunStore, key_of

PACKAGES = ("mmaudit", "torch", "transformers", "numpy", "pillow", "openai")


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            continue
    return out


def command_params(args: dict) -> dict:
    """A command's arguments (its ``locals()`` before anything else) as JSON: paths as strings."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in args.items()}


class Invocation:
    """One invocation of a command: ``start`` writes its parameters, ``finish`` its wall time."""

    def __init__(self, store: RunStore, command: str, params: dict) -> None:
        self.store, self.t0 = store, time.monotonic()
        # to the microsecond: two commands of one process within a second (an audit, then its transfer) are two
        # invocations, never one key (which kept the first and dropped the second's parameters)
        now = time.time()
        started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
        self.id = f"{started}-{os.getpid()}"
        store.put({"kind": "run", "key": key_of(kind="run", id=self.id), "id": self.id, "command": command,
                   "params": params, "versions": versions(), "started": started})

    def finish(self, **extra) -> None:
        self.store.put({"kind": "run_end", "key": key_of(kind="run_end", id=self.id), "id": self.id,
                        "seconds": round(time.monotonic() - self.t0, 1)} | extra)


def invocations(store: RunStore) -> list[dict]:
    """Every invocation of the run, oldest first, with its wall time when it finished (None: killed)."""
    ends = {r["id"]: r for r in store.records("run_end")}
    return sorted(({**r, "seconds": ends.get(r["id"], {}).get("seconds")} for r in store.records("run")),
                  key=lambda r: r["id"])
