"""`mmaudit bench replay` and `bench ablate`: SATR re-routed from recorded decisions, and its ablations."""

from __future__ import annotations

from pathlib import Path

import typer

from mmaudit.cli.common import console, flag, print_table
from mmaudit.errors import UsageError
from mmaudit.jsonout import dumps


def parse_policies(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        method, sep, policy = item.partition("=")
        if not sep:
            raise UsageError(f"--policy {item!r}: expected METHOD=POLICY, e.g. soft_conductor=conservative")
        out[method.strip()] = policy.strip()
    return out


def bench_replay(
    choices: Path = typer.Option(..., help="Folder holding evaluation/choices/<stack>/<dataset>/*.choices.jsonl "
                                 "(a release checkout, a bench run, or the choices folder itself)."),
    out: Path = typer.Option(..., help="Where the recomputed choices files go (the same layout)."),
    policy: list[str] = typer.Option(None, help="METHOD=POLICY to re-route under another released policy "
                                     "(strict, soft, field, conservative), e.g. field_selector=conservative."),
    as_json: bool = flag("--json", help="Print the agreement as JSON."),
) -> None:
    """Recompute every router's final_decision and chosen_source from recorded gate and resolver outputs."""
    from mmaudit.rag.evaluate.replay import replay

    res = replay(choices, out, parse_policies(policy))
    (out / "replay.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(dumps(res, indent=2))
    if as_json:
        print(dumps(res["agreement"], indent=2))
        return
    rows = [[where, m, f"{a['agree']}/{a['of']}", f"{100 * a['agree'] / a['of']:.1f}"]
            for where, by in res["agreement"].items() for m, a in sorted(by.items())]
    print_table("Agreement with the recorded decisions (final_decision / decision and chosen_source)",
                ["stack/dataset", "method", "rows", "%"], rows, left=("stack/dataset", "method"))
    total = sum(a["of"] for by in res["agreement"].values() for a in by.values())
    agree = sum(a["agree"] for by in res["agreement"].values() for a in by.values())
    console.print(f"agreement {agree}/{total} rows; {len(res['files'])} files under {out / 'evaluation' / 'choices'}")


def bench_ablate(
    fields: bool = flag("--fields", help="G.8: the select-only resolver re-run with one structured "
                                "field removed at a time, routed as Field-Selector."),
    components: bool = flag("--components", help="G.9: self-check only, triage only, Cascaded Router."),
    folder: Path = typer.Option(None, help="A QIMG-7 folder; default: the bundled mini benchmark."),
    out: Path = typer.Option(Path("runs/bench-run"), help="Run folder (its calls cache is reused)."),
    model: str = typer.Option(None, help="'MODEL@URL' generator/gate stack; default: the embedded model."),
    judge: str = typer.Option(None, help="'MODEL@URL' judge; default: the generator."),
    concurrency: int = typer.Option(8),
    limit: int = typer.Option(None, help="Only the first N questions."),
    token_budgets: str = typer.Option(None, help="Token budgets per component (as in bench run)."),
    max_tokens: str = typer.Option(None, hidden=True, help="Deprecated: --token-budgets."),
) -> None:
    """SATR ablations on a benchmark: TC, TP, Drop, Balanced per variant, deltas against the full method."""
    from mmaudit.cli.bench import EMBEDDED_LIMIT, budgets_option, mini_folder, stack_models
    from mmaudit.rag.evaluate.ablate import ablate_components, ablate_fields
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.rag.evaluate.tables import pct

    if fields == components:
        raise UsageError("choose one of --fields and --components")
    folder = mini_folder(folder)
    out.mkdir(parents=True, exist_ok=True)
    chat, judge_chat, name, budgets, compact, notes = stack_models(
        out, model, judge, concurrency, {}, budgets_option({"token_budgets": token_budgets, "max_tokens": max_tokens}))
    cfg = BenchConfig(stack=name, limit=limit if limit is not None else (EMBEDDED_LIMIT if compact else None),
                      budgets=budgets, **compact)
    kind = "fields" if fields else "components"
    table = (ablate_fields if fields else ablate_components)(folder, chat, out / f"ablate-{kind}", judge_chat, cfg)
    head = ["ablation", "TC", "TP", "Drop", "Balanced"] + (["Δ Bal.", "Δ TP"] if fields else []) + ["failed"]
    rows = [[r["ablation"]] + [pct(r[k]) for k in ("tc", "tp", "drop", "balanced")]
            + ([f"{100 * r['d_balanced']:+.1f}", f"{100 * r['d_tp']:+.1f}"] if fields else []) + [str(r["failed"])]
            for r in table]
    title = ("Resolver field ablation (G.8; Field-Selector, support %)" if fields
             else "Router component ablation (G.9; support %)")
    print_table(title, head, rows, left=("ablation",))
    for n in notes:
        console.print(f"[yellow]{n}[/yellow]")
    (out / f"ablate-{kind}.json").write_text(dumps({"title": title, "rows": table, "notes": notes}, indent=2))
    console.print(f"judged files under {out / f'ablate-{kind}'}; table {out / f'ablate-{kind}.json'}")
