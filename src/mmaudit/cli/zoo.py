"""`mmaudit zoo`: the embedded tiny VLMs' clean accuracy, and training a level from scratch."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from mmaudit.cli.common import console, flag, progress_bar
from mmaudit.jsonout import dumps
from mmaudit.models.levels import LEVELS


def zoo_accuracy(levels: list[str], n: int, seed: int, show_progress: bool = True) -> dict[str, dict[str, float]]:
    from mmaudit.data.synthetic import synthetic_set
    from mmaudit.models.zoo.adapter import load_zoo
    from mmaudit.models.zoo.evaluate import accuracy_by_family

    models = {level: load_zoo(level) for level in levels}  # an unknown level is refused before any work
    samples = synthetic_set(n, seed=seed)
    results: dict[str, dict[str, float]] = {}
    with progress_bar() as bar:
        for level in levels:
            task = bar.add_task(f"zoo-{level}", total=len(samples), visible=show_progress)
            results[level] = accuracy_by_family(
                models[level], samples, progress=lambda k, t=task: bar.advance(t, k)
            )
    return results


def print_accuracy(results: dict[str, dict[str, float]], n: int) -> None:
    cols = ["charts", "documents", "scenes", "overall", "reading"]
    table = Table(title=f"Zoo clean accuracy (% exactly right, held-out synthetic set, {n} per family)")
    table.add_column("model")
    for c in cols:
        table.add_column(c, justify="right")
    for level, acc in results.items():
        table.add_row(f"zoo-{level} ({level})", *[f"{acc.get(c, float('nan')):.1f}" for c in cols])
    console.print(table)



def zoo_eval(
    level: list[str] = typer.Option(list(LEVELS), "--level", help="Levels to evaluate."),
    n: int = typer.Option(200, help="Questions per family (charts, documents, scenes, reading)."),
    seed: int = typer.Option(10_000, help="Seed of the held-out set (10000 is never used in training)."),
    as_json: bool = flag("--json", help="Print JSON for machines."),
) -> None:
    """Clean accuracy of the shipped zoo models per family and level."""
    results = zoo_accuracy(level, n, seed, show_progress=not as_json)
    if as_json:
        print(dumps(results, indent=2))
    else:
        print_accuracy(results, n)



def zoo_train(
    level: str = typer.Option("L2", help="L1, L2 or L3."),
    seed: int = typer.Option(0, help="Training seed (data, init and batch order)."),
    steps: int = typer.Option(None, help="QA training steps (default: the recipe's)."),
    focus_steps: int = typer.Option(None, help="Scene-weighted steps after the QA phase (default: the recipe's)."),
    out: Path = typer.Option(Path("runs/zoo"), help="Where weights and model card are written."),
    workdir: Path = typer.Option(Path("runs/zoo-work"), help="Checkpoints and cached data; a rerun resumes here."),
    threads: int = typer.Option(2, help="CPU threads."),
) -> None:
    """Train one zoo level from scratch (resumable, deterministic)."""
    from mmaudit.models.zoo.recipe import run_recipe
    from mmaudit.models.zoo.train import Recipe

    recipe = Recipe(level=level, seed=seed, threads=threads)
    if steps is not None:
        recipe.steps = steps
    if focus_steps is not None:
        recipe.focus_steps = focus_steps
    def log(line: str) -> None:
        console.print(line)
        console.file.flush()

    run_recipe(recipe, out, workdir, log=log)
