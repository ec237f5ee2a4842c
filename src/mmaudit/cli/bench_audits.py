"""`mmaudit bench atomic`, `bench judges`, `bench kappa`: the paper's audits of the judge and of the answers."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from mmaudit.cli.bench import chat_model
from mmaudit.cli.common import console, print_table
from mmaudit.errors import UsageError
from mmaudit.jsonout import dumps
from mmaudit.rag.evaluate.tables import pct


def _judged_and_clean(folder: Path, run: Path, stack: str | None):
    from mmaudit.rag.evaluate.run import load_rows
    from mmaudit.rag.evaluate.score import judged_rows

    clean = {(r.dataset.lower(), str(r.qid)): [t.model_dump() for t in r.text_evidence]
             for r in load_rows(folder) if r.regime == "TC_IC"}
    return judged_rows(run, stack), clean


def bench_atomic(
    folder: Path = typer.Option(Path("runs/bench"), help="The benchmark folder (for the trusted clean evidence)."),
    run: Path = typer.Option(Path("runs/bench-run"), help="The run folder holding evaluation/judged/."),
    stack: str = typer.Option(None, help="Which stack under evaluation/judged/."),
    model: str = typer.Option(None, help="Decomposer and claim judge: 'MODEL@URL'; default the embedded model."),
    per_dataset: int = typer.Option(5, help="Questions drawn per dataset (all 16 regimes kept)."),
    seed: int = typer.Option(0),
) -> None:
    """Atomic factuality audit (Appendix I): claims judged one by one, uncertain = 0."""
    from mmaudit.rag.evaluate.audits import atomic_audit

    per, clean = _judged_and_clean(folder, run, stack)
    res = atomic_audit(per, clean, chat_model(model, run / "calls.jsonl"), per_dataset=per_dataset, seed=seed)
    (run / "atomic.json").write_text(dumps(res, indent=2))
    print_table(f"Atomic factuality ({res['questions']} questions, {res['claims']} claims)",
                ["method", "TC", "TP", "Drop", "Balanced"],
                [[m] + [pct(v[k]) for k in ("tc", "tp", "drop", "balanced")] for m, v in res["methods"].items()],
                left=("method",))


def bench_judges(
    judge: list[str] = typer.Option(..., help="NAME=MODEL@URL, repeated: the judges to compare."),
    folder: Path = typer.Option(Path("runs/bench")),
    run: Path = typer.Option(Path("runs/bench-run")),
    stack: str = typer.Option(None),
    per_dataset: int = typer.Option(5),
    seed: int = typer.Option(0),
) -> None:
    """Evaluator-sensitivity audit (G.6): balanced support per method under several judges, one subset."""
    from mmaudit.rag.evaluate.audits import evaluator_sensitivity

    per, clean = _judged_and_clean(folder, run, stack)
    judges = {name: chat_model(spec, run / "calls.jsonl") for name, _, spec in (j.partition("=") for j in judge)}
    res = evaluator_sensitivity(per, clean, judges, per_dataset=per_dataset, seed=seed)
    methods = sorted({m for v in res.values() for m in v})
    print_table("Balanced support per judge (%)", ["judge", *methods],
                [[name] + [pct(v.get(m, float("nan"))) for m in methods] for name, v in res.items()],
                left=("judge",))


def bench_kappa(
    human: Path = typer.Option(..., help="JSONL of {dataset, qid, regime, baseline, label} from a human "
                               "annotator (dataset may be left out when the run holds one)."),
    run: Path = typer.Option(Path("runs/bench-run")),
    stack: str = typer.Option(None),
) -> None:
    """Human vs judge agreement (G.7): exact agreement, Cohen's kappa unweighted and quadratic-weighted."""
    from mmaudit.rag.evaluate.audits import cohen_kappa
    from mmaudit.rag.evaluate.score import judged_rows

    judged = {(ds, str(r["qid"]), r["regime"], m): r["label"] for m, by in judged_rows(run, stack).items()
              for ds, rows in by.items() for r in rows}
    datasets = sorted({k[0] for k in judged})
    pairs = []
    for n, line in enumerate(human.read_text().splitlines(), 1):
        if line.strip():
            h = json.loads(line)
            # keyed by (dataset, qid): released qids repeat across datasets
            if "dataset" not in h and len(datasets) > 1:
                raise UsageError(f"{human.name}:{n}: no 'dataset' field, and the run holds {datasets}")
            ds = str(h.get("dataset", datasets[0] if datasets else "")).lower()
            key = (ds, str(h["qid"]), h["regime"], h["baseline"])
            if key not in judged:
                raise UsageError(f"{human.name}:{n}: no judged row for {key}")
            pairs.append((h["label"], judged[key]))
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    agree = sum(x == y for x, y in pairs) / len(pairs)
    console.print(f"{len(pairs)} outputs: exact agreement {pct(agree)}%, Cohen's kappa {cohen_kappa(a, b):.3f}, "
                  f"quadratic-weighted {cohen_kappa(a, b, 'quadratic'):.3f}")
