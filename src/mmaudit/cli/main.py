"""The Typer app: every command group and where its commands live."""

from __future__ import annotations

import typer

from mmaudit.cli import bench, bench_audits, bench_build, data, report, satr, zoo
from mmaudit.cli.audit import audit_app
from mmaudit.cli.common import friendly

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Audit the visual channel of VLMs and multimodal RAG."
)
zoo_app = typer.Typer(no_args_is_help=True, help="The embedded zoo of tiny VLMs (L1/L2/L3).")
data_app = typer.Typer(no_args_is_help=True, help="Synthetic visual QA; what an audit would attack with.")
bench_app = typer.Typer(no_args_is_help=True, help="QIMG-7 + SATR: polluted multimodal RAG.")

app.command()(friendly(report.demo))
app.command()(friendly(report.report))
app.add_typer(audit_app, name="audit")
app.add_typer(zoo_app, name="zoo")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
zoo_app.command("eval")(friendly(zoo.zoo_eval))
zoo_app.command("train")(friendly(zoo.zoo_train))
data_app.command("synth")(friendly(data.data_synth))
data_app.command("wrong")(friendly(data.data_wrong))
for name, command in (("score", bench_build.bench_score), ("build", bench_build.bench_build),
                      ("run", bench.bench_run), ("atomic", bench_audits.bench_atomic),
                      ("judges", bench_audits.bench_judges), ("kappa", bench_audits.bench_kappa),
                      ("replay", satr.bench_replay), ("ablate", satr.bench_ablate)):
    bench_app.command(name)(friendly(command))
