"""What every command shares: the console, the progress bar, printing a table."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mmaudit.errors import MMAuditError, UsageError

console = Console(width=None if sys.stdout.isatty() else 150, emoji=False)


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def progress_callback(bar: Progress) -> Callable[[str, int, int], None]:
    """A (name, done, total) callback that keeps one bar per name."""
    tasks: dict[str, int] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = bar.add_task(name, total=total)
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
