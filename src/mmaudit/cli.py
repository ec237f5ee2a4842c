"""The `mmaudit` command line: thin Typer commands over the Python API."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Audit the visual channel of VLMs and multimodal RAG."
)
zoo_app = typer.Typer(no_args_is_help=True, help="The embedded zoo of tiny VLMs (L1/L2/L3).")
data_app = typer.Typer(no_args_is_help=True, help="Synthetic visual QA.")
app.add_typer(zoo_app, name="zoo")
app.add_typer(data_app, name="data")
bench_app = typer.Typer(no_args_is_help=True, help="QIMG-7 + SATR: polluted multimodal RAG.")
app.add_typer(bench_app, name="bench")
console = Console(width=None if sys.stdout.isatty() else 150)
LEVELS = ["L1", "L2", "L3"]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def zoo_accuracy(levels: list[str], n: int, seed: int, show_progress: bool = True) -> dict[str, dict[str, float]]:
    from mmaudit.data.synthetic import synthetic_set
    from mmaudit.models.zoo.adapter import load_zoo
    from mmaudit.models.zoo.evaluate import accuracy_by_family

    samples = synthetic_set(n, seed=seed)
    results: dict[str, dict[str, float]] = {}
    with _progress() as bar:
        for level in levels:
            task = bar.add_task(f"zoo-{level}", total=len(samples), visible=show_progress)
            results[level] = accuracy_by_family(
                load_zoo(level), samples, progress=lambda k, t=task: bar.advance(t, k)
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


@zoo_app.command("eval")
def zoo_eval(
    level: list[str] = typer.Option(LEVELS, "--level", help="Levels to evaluate."),
    n: int = typer.Option(200, help="Questions per family (charts, documents, scenes, reading)."),
    seed: int = typer.Option(10_000, help="Seed of the held-out set (10000 is never used in training)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
) -> None:
    """Clean accuracy of the shipped zoo models per family and level."""
    results = zoo_accuracy(level, n, seed, show_progress=not as_json)
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        print_accuracy(results, n)


@zoo_app.command("train")
def zoo_train(
    level: str = typer.Option("L2", help="L1, L2 or L3."),
    seed: int = typer.Option(0, help="Training seed (data, init and batch order)."),
    steps: int = typer.Option(None, help="QA training steps (default: the recipe's)."),
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
    def log(line: str) -> None:
        console.print(line)
        console.file.flush()

    run_recipe(recipe, out, workdir, log=log)


@data_app.command("synth")
def data_synth(
    out: Path = typer.Option(Path("runs/synthetic"), help="Folder for PNG images and samples.jsonl."),
    n: int = typer.Option(10, help="Samples per family."),
    seed: int = typer.Option(0),
) -> None:
    """Write synthetic samples (images + questions + layout metadata) to look at."""
    from mmaudit.data.io import write_samples
    from mmaudit.data.synthetic import synthetic_set

    path = write_samples(synthetic_set(n, seed=seed), out)
    console.print(f"wrote {path}")


def parse_eps(text: str) -> float:
    """'8/255', '0.03' or '8' (read as /255 when > 1)."""
    if "/" in text:
        num, den = text.split("/")
        return float(num) / float(den)
    value = float(text)
    return value / 255 if value > 1 else value


def load_models(specs: list[str]):
    from mmaudit.models.zoo.adapter import load_zoo

    models = []
    for spec in specs:
        if spec == "zoo":
            models += [load_zoo(level) for level in LEVELS]
        elif spec.startswith("zoo:"):
            models.append(load_zoo(spec.split(":", 1)[1]))
        else:
            from mmaudit.models.hf import load_hf

            level = None
            if "@" in spec:
                spec, level = spec.rsplit("@", 1)
            models.append(load_hf(spec, level=level, dtype="float32"))
    return models


def load_audit_data(spec: str, limit: int | None):
    """'synthetic' (the bundled set), 'synthetic:N' (N per task family) or a JSONL path."""
    from mmaudit.data.io import iter_jsonl
    from mmaudit.data.synthetic import FAMILIES, synthetic_set
    from mmaudit.errors import InputError

    if spec.startswith("synthetic"):
        n = int(spec.split(":", 1)[1]) if ":" in spec else 32
        samples, errors = synthetic_set(n, seed=10_000, families=FAMILIES), []
    else:
        items = list(iter_jsonl(Path(spec)))
        samples = [x for x in items if not isinstance(x, InputError)]
        errors = [x for x in items if isinstance(x, InputError)]
    if limit is not None:
        samples = samples[:limit]
    return samples, errors


@app.command()
def audit(
    model: list[str] = typer.Option(["zoo"], help="'zoo', 'zoo:L2', or a local HF checkpoint (append @L1/@L2/@L3)."),
    data: str = typer.Option("synthetic", help="'synthetic', 'synthetic:N' (per family) or a JSONL of samples."),
    attacks: str = typer.Option("vis_pgd,end_pgd,mantis", help="Comma-separated pixel attacks."),
    eps: str = typer.Option("8/255", help="L-infinity radius in [0, 1] pixel units, e.g. 8/255."),
    steps: int = typer.Option(40, help="PGD steps."),
    alpha: float = typer.Option(None, help="Step size (default eps/8)."),
    seed: int = typer.Option(0, help="Random-start and bootstrap seed."),
    limit: int = typer.Option(None, help="Audit only the first N samples."),
    batch: int = typer.Option(32, help="Samples per attack batch."),
    paper_protocol: bool = typer.Option(False, "--paper-protocol", help="No early stopping: the full fixed budget."),
    downscale: int = typer.Option(None, help="Memory fallback: optimise noise at this side length, then upsample."),
    n_boot: int = typer.Option(10_000, help="Bootstrap replicates."),
    out: Path = typer.Option(Path("runs/audit"), help="Run folder: results.jsonl (the store), adv/, report.md."),
) -> None:
    """FusionAudit pixel pathway: clean pass, attacks on the clean-correct set, R0/R+/delta with CIs."""
    from mmaudit.audit import AuditConfig, make_attack, run_audit
    from mmaudit.report import summarise, write_report

    cfg = AuditConfig(attacks=[a.strip() for a in attacks.split(",") if a.strip()], eps=parse_eps(eps), steps=steps,
                      alpha=alpha, seed=seed, batch=batch, early_stop=not paper_protocol, downscale=downscale)
    samples, errors = load_audit_data(data, limit)
    models = load_models(model)
    with _progress() as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=done)

        store = run_audit(models, samples, out, cfg, errors=errors, progress=progress)
    params = {a: make_attack(a, cfg).params() for a in cfg.attacks}
    summary = summarise(store, params, n_boot=n_boot, seed=seed)
    path = write_report(summary, out)
    print_audit_table(summary)
    console.print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}  report: {path}")


def print_audit_table(summary: dict) -> None:
    from mmaudit.report import table_rows

    head, rows = table_rows(summary)
    table = Table(title="FusionAudit (pixel pathway): % of each model's clean-correct set")
    for h in head:
        table.add_column(h, justify="left" if h in ("model", "level") else "right")
    for r in rows:
        table.add_row(*r)
    console.print(table)
    if summary["errors"]:
        console.print(f"[yellow]{len(summary['errors'])} samples could not be audited; see report.md[/yellow]")


@bench_app.command("score")
def bench_score(
    judged: Path = typer.Option(..., help="Release root that holds evaluation/judged/<stack>/<dataset>/."),
    stack: str = typer.Option(None, help="Which stack, when there are several."),
    as_json: bool = typer.Option(False, "--json", help="Print the main table as JSON."),
) -> None:
    """Main table (TC, TP, Drop, Balanced; macro over datasets) from judged files."""
    from mmaudit.rag.score import main_table

    rows = main_table(judged, stack)
    if as_json:
        print(json.dumps([{k: r[k] for k in ("method", "tc", "tp", "drop", "balanced")} for r in rows], indent=2))
        return
    table = Table(title=f"QIMG-7 main table ({judged})")
    for h in ("method", "TC", "TP", "Drop", "Balanced", "datasets"):
        table.add_column(h, justify="left" if h in ("method", "datasets") else "right")
    for r in rows:
        table.add_row(r["method"], *[f"{100 * r[k]:.1f}" for k in ("tc", "tp", "drop", "balanced")],
                      ", ".join(r["datasets"]))
    console.print(table)


@app.command()
def demo(
    n: int = typer.Option(200, help="Questions per family for the accuracy table."),
    out: Path = typer.Option(Path("runs/demo"), help="Run folder of the audit."),
) -> None:
    """The main job on the embedded default: the zoo's accuracy table, then the default audit."""
    print_accuracy(zoo_accuracy(LEVELS, n, 10_000), n)
    audit(model=["zoo"], data="synthetic", attacks="vis_pgd,end_pgd,mantis", eps="8/255", steps=40, alpha=None,
          seed=0, limit=None, batch=32, paper_protocol=False, downscale=None, n_boot=10_000, out=out)


if __name__ == "__main__":  # pragma: no cover
    app()
