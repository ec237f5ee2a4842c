"""`mmaudit report` (rebuild a run's pages from its folder) and `mmaudit demo` (the main job, offline)."""

from __future__ import annotations

from pathlib import Path

import typer

from mmaudit.cli.common import LEVELS, console


def demo(
    n: int = typer.Option(200, help="Questions per family for the accuracy table."),
    out: Path = typer.Option(Path("runs/demo"), help="Run folder of the audit."),
) -> None:
    """The main job on the embedded default: the zoo's accuracy table, then the default audit."""
    from mmaudit.cli.audit import run_audit_command
    from mmaudit.cli.zoo import print_accuracy, zoo_accuracy

    print_accuracy(zoo_accuracy(LEVELS, n, 10_000), n)
    run_audit_command(out=out)
    page = out / "report.html"
    console.print(f"HTML report: {page.resolve()} ({page.stat().st_size / 1024:.0f} KiB, self-contained; open it in "
                  f"a browser, or rebuild it with `mmaudit report {out}`)")


def report(
    run: Path = typer.Argument(..., help="A run folder: an audit, an audit sweep or a bench run."),
    open_page: bool = typer.Option(False, "--open", help="Open report.html in the default browser."),
    n_boot: int = typer.Option(None, help="Bootstrap replicates (default: the run's own)."),
) -> None:
    """Rebuild report.md and report.html (one self-contained page) from the run folder alone."""
    from mmaudit.errors import InputError
    from mmaudit.report.build import rebuild

    try:
        _, paths = rebuild(run, n_boot)
    except InputError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    for p in paths:
        console.print(f"{p}  ({p.stat().st_size / 1024:.0f} KiB)")
    if open_page:
        import webbrowser

        if not webbrowser.open(paths[-1].resolve().as_uri()):
            console.print(f"[yellow]no browser to open here; open {paths[-1].resolve()} yourself[/yellow]")
