"""`mmaudit bench build` and `bench score`: constructing a QIMG-7-style benchmark, scoring judged files."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from mmaudit.cli.common import console, flag, print_table, progress_bar, progress_callback
from mmaudit.errors import UsageError
from mmaudit.jsonout import dumps


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
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark, read_families
    from mmaudit.rag.construct.inputs import read_csv_pools, read_questions

    caps: int | dict[str, int] | None = None
    if limit:
        try:
            caps = int(limit) if limit.strip().isdigit() else \
                {k.strip(): int(v) for k, v in (x.split("=") for x in limit.split(",") if x.strip())}
        except ValueError:
            raise UsageError(f"--limit {limit!r}: N or DATASET=N,...") from None

    if passages is not None or images is not None:
        if passages is None or images is None:
            raise UsageError("--passages and --images go together")
        items = read_csv_pools(passages, images)
    elif inputs is None:
        from mmaudit.rag.construct.mini import mini_inputs

        items = mini_inputs()
    else:
        items = read_questions(inputs)
    check = None
    if ontopic >= 0:
        from mmaudit.rag.construct.ontopic import OnTopic

        check = OnTopic(threshold=ontopic)
    with progress_bar() as bar:
        cfg = BuildConfig(family_seed=family_seed, seed=seed, limit=caps, ontopic=check, patch_steps=patch_steps,
                          style_steps=style_steps, families=read_families(families) if families else None)
        summary = build_benchmark(items, out, cfg, progress=progress_callback(bar))
    (out / "summary.json").write_text(dumps(summary, indent=2))
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



def bench_score(
    judged: Path = typer.Option(..., help="Release root that holds evaluation/judged/<stack>/<dataset>/."),
    stack: str = typer.Option(None, help="Which stack, when there are several."),
    as_json: bool = flag("--json", help="Print the main table as JSON (with --tables: every table, as "
                         "{title, head, rows})."),
    n_boot: int = typer.Option(10_000, help="Question-clustered paired bootstrap replicates (0: no CIs)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    tables: bool = flag("--tables", help="Also the diagnostic tables: attack family x method "
                                "(G.3), channel isolation (G.4), decisions, route accuracy (G.10)."),
) -> None:
    """Main table (TC, TP, Drop, Balanced; macro over datasets) from judged files, with bootstrap CIs."""
    from mmaudit.rag.evaluate.score import clustered_bootstrap, judged_rows, main_table

    rows = main_table(judged, stack)
    if as_json:
        main = [{k: r[k] for k in ("method", "tc", "tp", "drop", "balanced")} for r in rows]
        if tables:
            from mmaudit.rag.evaluate.tables import bench_tables

            every = [{"title": t, "head": h, "rows": b} for t, h, b in bench_tables(judged, stack, n_boot, seed)]
            print(dumps({"main": main, "tables": every}, indent=2))
        else:
            print(dumps(main, indent=2))
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
        from mmaudit.rag.evaluate.tables import bench_tables

        for title, head, body in bench_tables(judged, stack, 0, seed)[1:]:
            print_table(title, head, body, left=("method",))
