"""What every command shares: the console, the progress bar, printing a table."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mmaudit.errors import MMAuditError, UsageError

console = Console(width=None if sys.stdout.isatty() else 150, emoji=False)


def progress_bar() -> Progress | LogProgress:
    """Bars on a terminal; plain progress lines when stdout is a log (a batch job, ``> run.log``)."""
    if not console.is_terminal:
        return LogProgress(float(os.environ.get("MMAUDIT_PROGRESS_EVERY", "30")))
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


class LogProgress:
    """What a bar would show, as one line per stage at most every ``every`` seconds (and when a stage starts and
    ends), as tqdm writes in batch jobs: done/total, failures where they are counted, rate, elapsed time."""

    def __init__(self, every: float = 30.0) -> None:
        import threading

        self.every = every
        self.tasks: dict[int, dict] = {}
        self._stop = threading.Event()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def start_heartbeat(self) -> None:
        """A daemon thread that calls :meth:`beat` until the context ends."""
        import threading

        def run() -> None:
            while not self._stop.wait(min(self.every, 5) or 1):
                self.beat()

        threading.Thread(target=run, daemon=True).start()

    def add_task(self, name: str, total: int, visible: bool = True) -> int:
        self.tasks[len(self.tasks)] = {"name": name, "total": total, "t0": time.monotonic(), "said": None,
                                       "said_at": None, "done": 0, "visible": visible}
        return len(self.tasks) - 1

    def update(self, task: int, completed: int, counts: dict | None = None) -> None:
        """A line for the stage when it starts, ends, or ``every`` seconds have passed since its last one (a
        heartbeat even when no unit finished: ``counts``, such as requests answered and failed, still move)."""
        t, now = self.tasks[task], time.monotonic()
        t["done"] = completed
        if not t["visible"]:
            return
        finished = completed >= t["total"] and completed != t["said_at"]
        if not (t["said"] is None or finished or now - t["said"] >= self.every):
            return
        t["said"], t["said_at"] = now, completed
        elapsed = now - t["t0"]
        rate = ""
        if elapsed >= 1 and completed:  # (not for work found done); slow stages as tqdm shows them: time per unit
            rate = f", {completed / elapsed:.2f}/s" if completed >= elapsed else f", {elapsed / completed:.1f} s each"
        extra = "".join(f", {v} {k}" for k, v in (counts or {}).items())
        print(f"[{time.strftime('%H:%M:%S')}] {t['name']}: {completed}/{t['total']}{rate}{extra}, "
              f"{elapsed:.0f} s elapsed", flush=True)

    def advance(self, task: int, k: int = 1) -> None:
        self.update(task, self.tasks[task]["done"] + k)

    def beat(self) -> None:
        """Repeat each unfinished stage's line once ``every`` seconds have passed (work in flight shows)."""
        for task, t in list(self.tasks.items()):
            if t["done"] < t["total"]:
                self.update(task, t["done"], self.counts() if self.counts else None)

    counts = None  # a callable giving the counts a heartbeat shows


def progress_callback(bar: Progress | LogProgress, counts: Callable[[], dict] | None = None
                      ) -> Callable[[str, int, int], None]:
    """A (name, done, total) callback that keeps one bar (or log line) per name; ``counts``: what else log lines
    show (requests answered, failed), polled by a heartbeat every few seconds while work is in flight."""
    tasks: dict[str, int] = {}
    if isinstance(bar, LogProgress) and counts is not None:
        bar.counts = counts
        bar.start_heartbeat()

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = bar.add_task(name, total=total)
        if isinstance(bar, LogProgress):
            bar.update(tasks[name], done, counts() if counts else None)
        else:
            bar.update(tasks[name], completed=done)

    return update


def print_table(title: str, head: list[str], rows: list[list[str]],
                left: tuple[str, ...] = ("model", "level", "metric")) -> None:
    table = Table(title=title)
    for h in head:
        table.add_column(h, justify="left" if h in left else "right")
    for r in rows:
        table.add_row(*r)
    console.print(table)


def parse_eps(text: str) -> float:
    """'8/255', '0.03' or '8' (read as /255 when > 1)."""
    if "/" in text:
        num, den = text.split("/")
        return float(num) / float(den)
    value = float(text)
    return value / 255 if value > 1 else value


def parse_list(text: str, kind=str) -> list:
    return [kind(x.strip()) for x in text.split(",") if x.strip()]


def flag(*names: str, help: str):
    """A switch: present means on (the help shows "(flag)", not a value to type)."""
    return typer.Option(False, *names, metavar="(flag)", help=help)


def parse_price(text: str | None) -> tuple[float, float]:
    """--price 'PROMPT,COMPLETION' per 1k tokens (none: free)."""
    if not text:
        return (0.0, 0.0)
    try:
        prompt, completion = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--price: {text!r} is not PROMPT,COMPLETION (per 1k tokens)") from None
    return prompt, completion


def wait_option():
    """--wait for every command that takes a run folder's lock."""
    return flag("--wait", help="When another process holds the run folder, wait for it instead of refusing.")


USER_ERRORS = (MMAuditError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def one_line(e: BaseException) -> str:
    """A user error as one line: what went wrong and, where the error says it, the fix."""
    if isinstance(e, FileNotFoundError) and e.filename:
        return f"no such file or folder: {e.filename}"
    if isinstance(e, (NotADirectoryError, IsADirectoryError, PermissionError)) and e.filename:
        return f"{e.strerror.lower()}: {e.filename}"
    return " ".join(str(e).split())


def friendly(command: Callable) -> Callable:
    """A command whose user errors (bad input, missing files, unknown models, a busy run folder) end in one line
    and exit status 2, not a traceback; anything else is a bug and keeps its traceback."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as e:
            console.print(f"[red]error:[/red] {escape(one_line(e))}", soft_wrap=True)
            raise typer.Exit(2) from None

    return run
