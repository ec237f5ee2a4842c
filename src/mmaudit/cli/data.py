"""`mmaudit data`: synthetic samples to look at, and the wrong answers an audit will use."""

from __future__ import annotations

from pathlib import Path

import typer

from mmaudit.cli.common import console, flag, print_table
from mmaudit.jsonout import dumps


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



def data_wrong(
    data: str = typer.Option(..., help="As for `mmaudit audit --data`: 'synthetic[:N]', a JSONL, or "
                             "'chartqa:FILE.json,docvqa:FILE.json,mme:DIR'."),
    select: int = typer.Option(None, help="The balanced seeded draw `audit --select` would make."),
    seed: int = typer.Option(0, help="Seed of that draw."),
    limit: int = typer.Option(None, help="Only the first N samples."),
    wrong_ocr: str = typer.Option("auto", help="Use the image's OCR text for text labels: auto, on, off."),
    as_json: bool = flag("--json", help="A JSON list of {id, reference, wrong, answer_type, source}."),
) -> None:
    """Per sample, the task-matching wrong answer MANTIS, Typo-Evid and Nat-Evid will use (before any GPU hour)."""
    from mmaudit.audit import AuditConfig
    from mmaudit.cli.audit import plan_audit

    _, loaded = plan_audit(data, AuditConfig(), limit, select, seed, wrong_ocr)
    samples, errors = loaded.samples, loaded.errors
    rows = [{"id": s.id, "reference": s.answer, "wrong": s.meta.get("wrong_answer"),
             "answer_type": s.meta.get("wrong_kind"), "source": s.meta.get("wrong_source")} for s in samples]
    if as_json:
        print(dumps(rows, indent=2, ensure_ascii=False))
        return
    print_table(f"Wrong answers ({len(rows)} samples)", ["id", "reference", "wrong", "answer type", "source"],
                [[r["id"], r["reference"], r["wrong"] or "(none)", r["answer_type"] or "", r["source"] or ""]
                 for r in rows], left=("id", "reference", "wrong", "answer type", "source"))
    from collections import Counter

    console.print("by source: " + ", ".join(f"{k} {v}" for k, v in Counter(r["source"] for r in rows).items()))
    for e in errors:
        console.print(f"[yellow]{e}[/yellow]")
