"""`mmaudit bench replay` and `bench ablate`: SATR re-routed from recorded decisions, and its ablations."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from mmaudit.cli_common import console, print_table


def parse_policies(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        method, sep, policy = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"--policy {item!r}: expected METHOD=POLICY, e.g. soft_conductor=conservative")
        out[method.strip()] = policy.strip()
    return out


def bench_replay(
    choices: Path = typer.Option(..., help="Folder holding evaluation/choices/<stack>/<dataset>/*.choices.jsonl "
                                 "(a release checkout, a bench run, or the choices folder itself)."),
    out: Path = typer.Option(..., help="Where the recomputed choices files go (the same layout)."),
    policy: list[str] = typer.Option(None, help="METHOD=POLICY to re-route under another released policy "
                                     "(strict, soft, field, conservative), e.g. field_selector=conservative."),
    as_json: bool = typer.Option(False, "--json", help="Print the agreement as JSON."),
) -> None:
    """Recompute every router's final_decision and chosen_source from recorded gate and resolver outputs."""
    from mmaudit.errors import InputError
    from mmaudit.rag.evaluate.replay import replay

    try:
        res = replay(choices, out, parse_policies(policy))
    except InputError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    (out / "replay.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(json.dumps(res, indent=2))
    if as_json:
        print(json.dumps(res["agreement"], indent=2))
        return
    rows = [[where, m, f"{a['agree']}/{a['of']}", f"{100 * a['agree'] / a['of']:.1f}"]
            for where, by in res["agreement"].items() for m, a in sorted(by.items())]
    print_table("Agreement with the recorded decisions (final_decision / decision and chosen_source)",
                ["stack/dataset", "method", "rows", "%"], rows, left=("stack/dataset", "method"))
    total = sum(a["of"] for by in res["agreement"].values() for a in by.values())
    agree = sum(a["agree"] for by in res["agreement"].values() for a in by.values())
    console.print(f"agreement {agree}/{total} rows; {len(res['files'])} files under {out / 'evaluation' / 'choices'}")
