"""`mmaudit report` (rebuild a run's pages from its folder) and `mmaudit demo` (the main job, offline)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from mmaudit.cli.common import console, flag
from mmaudit.errors import UsageError
from mmaudit.models.levels import LEVELS


def demo(
    n: int = typer.Option(200, help="Questions per family for the accuracy table."),
    out: Path = typer.Option(Path("runs/demo"), help="Run folder of the audit."),
) -> None:
    """The main job on the embedded default: the zoo's accuracy table, the default audit, then the transfer
    matrix across the three zoo levels."""
    from mmaudit.cli.audit import run_audit_command, run_transfer_command
    from mmaudit.cli.zoo import print_accuracy, zoo_accuracy

    print_accuracy(zoo_accuracy(LEVELS, n, 10_000), n)
    run_audit_command(out=out)
    console.rule("Transfer across the zoo: each level's adversarial images shown to the others")
    run_transfer_command(out)
    page = out / "report.html"
    console.print(f"HTML report: {page.resolve()} ({page.stat().st_size / 1024:.0f} KiB, self-contained; open it in "
                  f"a browser, or rebuild it with `mmaudit report {out}`)")


def report(
    runs: list[Path] = typer.Argument(..., help="A run folder (an audit, an audit sweep or a bench run); with "
                                      "--compare, two or more audit run folders, the first the reference."),
    compare: bool = flag("--compare", help="Compare audit runs side by side: headlines, Table 1 aligned by "
                         "model and level, paired differences of R+ and R+ − R0 against the first run."),
    out: Path = typer.Option(None, help="With --compare: the folder for compare.html, compare.md and compare.json."),
    open_page: bool = flag("--open", help="Open the page in the default browser."),
    n_boot: int = typer.Option(None, help="Bootstrap replicates (default: the run's own; 2000 for --compare)."),
) -> None:
    """Rebuild report.md and report.html (one self-contained page) from the run folder alone, or compare runs."""
    if compare:
        from mmaudit.report.compare import compare_runs, compare_text

        if out is None:
            raise UsageError("--compare needs --out DIR for the comparison page")
        result = compare_runs(list(runs), out, n_boot if n_boot is not None else 2000)
        for line in compare_text(result):
            console.print(escape(line), soft_wrap=True)
        paths = [out / "compare.md", out / "compare.html"]
    else:
        from mmaudit.report.build import rebuild

        if len(runs) != 1:
            raise UsageError(f"one run folder to rebuild, got {len(runs)}; to put runs side by side use --compare")
        _, paths = rebuild(runs[0], n_boot)
    for p in paths:
        console.print(f"{p}  ({p.stat().st_size / 1024:.0f} KiB)")
    if open_page:
        import webbrowser

        if not webbrowser.open(paths[-1].resolve().as_uri()):
            console.print(f"[yellow]no browser to open here; open {paths[-1].resolve()} yourself[/yellow]")
