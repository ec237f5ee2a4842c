"""The `mmaudit` command line: thin Typer commands over the Python API."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Audit the visual channel of VLMs and multimodal RAG."
)
zoo_app = typer.Typer(no_args_is_help=True, help="The embedded zoo of tiny VLMs (L1/L2/L3).")
data_app = typer.Typer(no_args_is_help=True, help="Synthetic visual QA; what an audit would attack with.")
app.add_typer(zoo_app, name="zoo")
app.add_typer(data_app, name="data")
bench_app = typer.Typer(no_args_is_help=True, help="QIMG-7 + SATR: polluted multimodal RAG.")
app.add_typer(bench_app, name="bench")
from mmaudit.cli_common import LEVELS, console, print_table, progress_bar, progress_callback  # noqa: E402


def zoo_accuracy(levels: list[str], n: int, seed: int, show_progress: bool = True) -> dict[str, dict[str, float]]:
    from mmaudit.data.synthetic import synthetic_set
    from mmaudit.models.zoo.adapter import load_zoo
    from mmaudit.models.zoo.evaluate import accuracy_by_family

    samples = synthetic_set(n, seed=seed)
    results: dict[str, dict[str, float]] = {}
    with progress_bar() as bar:
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


@data_app.command("wrong")
def data_wrong(
    data: str = typer.Option(..., help="As for `mmaudit audit --data`: 'synthetic[:N]', a JSONL, or "
                             "'chartqa:FILE.json,docvqa:FILE.json,mme:DIR'."),
    select: int = typer.Option(None, help="The balanced seeded draw `audit --select` would make."),
    seed: int = typer.Option(0, help="Seed of that draw."),
    limit: int = typer.Option(None, help="Only the first N samples."),
    wrong_ocr: str = typer.Option("auto", help="Use the image's OCR text for text labels: auto, on, off."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list of {id, reference, wrong, answer_type, source}."),
) -> None:
    """Per sample, the task-matching wrong answer MANTIS, Typo-Evid and Nat-Evid will use (before any GPU hour)."""
    from mmaudit.cli_audit import load_audit_data

    samples, errors = load_audit_data(data, limit, select, seed, wrong_ocr)
    rows = [{"id": s.id, "reference": s.answer, "wrong": s.meta.get("wrong_answer"),
             "answer_type": s.meta.get("wrong_kind"), "source": s.meta.get("wrong_source")} for s in samples]
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    print_table(f"Wrong answers ({len(rows)} samples)", ["id", "reference", "wrong", "answer type", "source"],
                [[r["id"], r["reference"], r["wrong"] or "(none)", r["answer_type"] or "", r["source"] or ""]
                 for r in rows], left=("id", "reference", "wrong", "answer type", "source"))
    from collections import Counter

    console.print("by source: " + ", ".join(f"{k} {v}" for k, v in Counter(r["source"] for r in rows).items()))
    for e in errors:
        console.print(f"[yellow]{e}[/yellow]")


@bench_app.command("score")
def bench_score(
    judged: Path = typer.Option(..., help="Release root that holds evaluation/judged/<stack>/<dataset>/."),
    stack: str = typer.Option(None, help="Which stack, when there are several."),
    as_json: bool = typer.Option(False, "--json", help="Print the main table as JSON."),
    n_boot: int = typer.Option(10_000, help="Question-clustered paired bootstrap replicates (0: no CIs)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    tables: bool = typer.Option(False, "--tables", help="Also the diagnostic tables: attack family x method "
                                "(G.3), channel isolation (G.4), decisions, route accuracy (G.10)."),
) -> None:
    """Main table (TC, TP, Drop, Balanced; macro over datasets) from judged files, with bootstrap CIs."""
    from mmaudit.rag.evaluate.score import clustered_bootstrap, judged_rows, main_table

    rows = main_table(judged, stack)
    if as_json:
        print(json.dumps([{k: r[k] for k in ("method", "tc", "tp", "drop", "balanced")} for r in rows], indent=2))
        return
    per = judged_rows(judged, stack)
    ref = "field_selector" if "field_selector" in per else None
    boot = clustered_bootstrap(per, n_boot, seed, [(ref, m) for m in sorted(per) if ref and m != ref]) \
        if n_boot else {"methods": {}, "deltas": {}}
    cis = boot["methods"]

    def cell(r: dict, k: str) -> str:
        if r["method"] not in cis:
            return f"{100 * r[k]:.1f}"
        _, lo, hi = cis[r["method"]][k]
        return f"{100 * r[k]:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"

    table = Table(title=f"QIMG-7 main table ({judged})" + (f"; 95% CIs, {n_boot} question-clustered paired "
                                                          f"bootstrap replicates, seed {seed}" if n_boot else ""))
    for h in ("method", "TC", "TP", "Drop", "Balanced", "datasets"):
        table.add_column(h, justify="left" if h in ("method", "datasets") else "right")
    for r in rows:
        table.add_row(r["method"], *[cell(r, k) for k in ("tc", "tp", "drop", "balanced")], ", ".join(r["datasets"]))
    console.print(table)
    for pair, d in boot["deltas"].items():
        console.print(f"paired delta {pair}: " + ", ".join(
            f"{k} {100 * d[k][0]:+.1f} [{100 * d[k][1]:+.1f}, {100 * d[k][2]:+.1f}]" for k in ("tc", "tp", "balanced")))
    if tables:
        from mmaudit.cli_common import print_table
        from mmaudit.rag.evaluate.tables import bench_tables

        for title, head, body in bench_tables(judged, stack, 0, seed)[1:]:
            print_table(title, head, body, left=("method",))


@bench_app.command("build")
def bench_build(
    inputs: Path = typer.Option(None, help="JSONL of questions with clean evidence; default: the bundled mini set."),
    passages: Path = typer.Option(None, help="CSV pool of passages (question_idx, question, title, snippet, url)."),
    images: Path = typer.Option(None, help="CSV pool of images (release columns + image_path), with --passages."),
    out: Path = typer.Option(Path("runs/bench"), help="Benchmark folder (regime JSONL, pool CSV, images, drops)."),
    limit: str = typer.Option(None, help="Evaluation cap per dataset, in dataset order (numeric qids as numbers): "
                              "N for every dataset, or e.g. 'longfact=50,biography=20,alpacafact=20,fava=20'."),
    family_seed: int = typer.Option(42, help="Seed of the text-pollution family preassignment (per dataset)."),
    families: Path = typer.Option(None, help="A fixed family preassignment (CSV/JSONL: dataset, qid, passage, "
                                  "family), e.g. AlpacaFact's release labels; other questions keep the seeded draw."),
    seed: int = typer.Option(0, help="Seed of the image operators (donors, patch start)."),
    ontopic: float = typer.Option(0.3, help="On-topic threshold (cosine, all-MiniLM-L6-v2); negative: off."),
    patch_steps: int = typer.Option(60, help="Adversarial-patch PGD steps."),
    style_steps: int = typer.Option(80, help="Style-transfer optimisation steps."),
) -> None:
    """Build a QIMG-7-style benchmark: 16 regimes per question, seven image pollutions, text pollution."""
    from mmaudit.rag.build.benchmark import BuildConfig, build_benchmark, read_families
    from mmaudit.rag.build.inputs import read_csv_pools, read_questions

    caps: int | dict[str, int] | None = None
    if limit:
        try:
            caps = int(limit) if limit.strip().isdigit() else \
                {k.strip(): int(v) for k, v in (x.split("=") for x in limit.split(",") if x.strip())}
        except ValueError:
            raise typer.BadParameter(f"--limit {limit!r}: N or DATASET=N,...") from None

    if passages is not None or images is not None:
        if passages is None or images is None:
            raise typer.BadParameter("--passages and --images go together")
        items = read_csv_pools(passages, images)
    elif inputs is None:
        from mmaudit.rag.build.mini import mini_inputs

        items = mini_inputs()
    else:
        items = read_questions(inputs)
    check = None
    if ontopic >= 0:
        from mmaudit.rag.build.ontopic import OnTopic

        check = OnTopic(threshold=ontopic)
    with progress_bar() as bar:
        cfg = BuildConfig(family_seed=family_seed, seed=seed, limit=caps, ontopic=check, patch_steps=patch_steps,
                          style_steps=style_steps, families=read_families(families) if families else None)
        summary = build_benchmark(items, out, cfg, progress=progress_callback(bar))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    c = summary["counts"]
    print_table("Construction and selection counts (Table 11)", ["stage", "count"], [
        ["initial candidate questions", str(c["initial"])], ["removed: bad input", str(c["removed_input"])],
        ["removed: no clean image evidence", str(c["removed_no_clean_image"])],
        ["removed: no polluted image evidence", str(c["removed_no_polluted_image"])],
        ["removed during preprocessing validation", str(c["removed_preprocessing"])],
        ["removed: unusable packaged image", str(c["removed_unusable_image"])], ["usable", str(c["usable"])],
        ["not selected (cap)", str(c["not_selected_cap"])], ["final", str(c["final"])]], left=("stage",))
    fams = sorted({f for v in summary["families"].values() for f in v})
    print_table("Text-pollution families (Table 9)", ["dataset", "N"] + fams,
                [[ds, str(sum(v.values()))] + [str(v.get(f, 0)) for f in fams]
                 for ds, v in summary["families"].items()], left=("dataset",))
    print_table("Image operators", ["operator", "applied", "method", "mean |Δpixel|"],
                [[a, str(o["applied"]), ", ".join(o["methods"]), f"{o['mean_abs_change']:.1f}"]
                 for a, o in summary["operators"].items()], left=("operator", "method"))
    if summary["drops"]:
        print_table("Dropped", ["qid", "stage", "reason"], [[str(d["qid"]), d["stage"], d["reason"]]
                                                          for d in summary["drops"]], left=("qid", "stage", "reason"))
    console.print(f"{summary['questions']} questions x {summary['regimes_per_question']} regimes = "
                  f"{summary['rows']} rows -> {', '.join(summary['files'])}; drops: {out / 'drops.csv'}"
                  + ("" if summary["ontopic_check"] else " (on-topic check off)"))


@app.command()
def demo(
    n: int = typer.Option(200, help="Questions per family for the accuracy table."),
    out: Path = typer.Option(Path("runs/demo"), help="Run folder of the audit."),
) -> None:
    """The main job on the embedded default: the zoo's accuracy table, then the default audit."""
    from mmaudit.cli_audit import run_audit_command

    print_accuracy(zoo_accuracy(LEVELS, n, 10_000), n)
    run_audit_command(out=out)
    page = out / "report.html"
    console.print(f"HTML report: {page.resolve()} ({page.stat().st_size / 1024:.0f} KiB, self-contained; open it in "
                  f"a browser, or rebuild it with `mmaudit report {out}`)")


@app.command()
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


def _register() -> None:
    from mmaudit.cli_audit import audit_app
    from mmaudit.cli_bench import bench_atomic, bench_judges, bench_kappa, bench_run
    from mmaudit.cli_satr import bench_ablate, bench_replay

    app.add_typer(audit_app, name="audit")
    bench_app.command("run")(bench_run)
    bench_app.command("atomic")(bench_atomic)
    bench_app.command("judges")(bench_judges)
    bench_app.command("kappa")(bench_kappa)
    bench_app.command("replay")(bench_replay)
    bench_app.command("ablate")(bench_ablate)


_register()

if __name__ == "__main__":  # pragma: no cover
    app()
