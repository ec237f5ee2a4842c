"""What every command shares: the console, the progress bar, printing a table."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 150)
LEVELS = ["L1", "L2", "L3"]


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


def print_table(title: str, head: list[str], rows: list[list[str]], left: tuple[str, ...] = ("model", "level")) -> None:
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
