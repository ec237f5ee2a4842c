"""`mmaudit audit` (both pathways, diagnostics, report) and `mmaudit audit sweep` (MANTIS stability)."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.markup import escape

from mmaudit.cli.common import console, friendly, parse_eps, parse_list, print_table, progress_bar, progress_callback
from mmaudit.cli.options import AuditOptions, PlacementOptions, SweepOptions, TransferOptions, command_from
from mmaudit.errors import UsageError
from mmaudit.manifest import Invocation

audit_app = typer.Typer(help="FusionAudit: white-box audit of VLMs along the pixel and rendered-text pathways.")


def load_models(specs: list[str], placement=None, endpoint: dict | None = None):
    from mmaudit.models.load import expand, load_model

    return [load_model(s, placement, endpoint) for s in expand(specs)]


def attach(models: list, out: Path) -> tuple[list, list[dict]]:
    """Endpoint targets keep their requests in the run folder (call under the run's lock), and are probed and shown
    the image canary once, before the work: (the black-box targets, their checks, also in the store)."""
    from mmaudit.models.vlm import VLM
    from mmaudit.store import RunStore

    black = [m for m in models if not isinstance(m, VLM)]
    checks = []
    for m in black:
        m.cache_in(out)
        rec = m.check()
        RunStore(out / "results.jsonl").put(rec)
        console.print(f"{escape(rec['line'])}; {escape(rec['canary_line'])}", soft_wrap=True)
        checks.append(rec)
    return black, checks


def refuse_endpoints(specs: list[str], why: str) -> None:
    bad = [s for s in specs if s.startswith("endpoint:")]
    if bad:
        raise UsageError(f"--model {bad[0]}: {why}")


WRONG_OCR = ("auto", "on", "off")


def wrong_ocr_reader(wrong_ocr: str):
    """The OCR reader wrong answers of text labels may draw on (auto: when the [ocr] extra is installed)."""
    from mmaudit.pathways.wrong import default_ocr

    if wrong_ocr not in WRONG_OCR:
        raise UsageError(f"--wrong-ocr must be one of {WRONG_OCR}, got {wrong_ocr!r}")
    ocr = default_ocr() if wrong_ocr != "off" else None
    if wrong_ocr == "on" and ocr is None:
        raise UsageError("--wrong-ocr on needs the [ocr] extra (rapidocr)")
    return ocr


def plan_audit(data: str, cfg, limit: int | None = None, select: int | None = None, seed: int = 0,
               wrong_ocr: str = "auto", prompt_suffix: str | None = None, samples: list | None = None):
    """Load ``--data`` (or take ``samples`` already made, e.g. from Python) and fix the audit's plan (wrong answers
    drawn from everything loaded): (plan, loaded)."""
    from mmaudit.audit.plan import AuditPlan
    from mmaudit.data.sources import Loaded, load_data

    ocr = wrong_ocr_reader(wrong_ocr)
    if samples is None:
        loaded = load_data(data, limit, select, seed, prompt_suffix)
    else:
        taken = list(samples)[:limit] if limit is not None else list(samples)
        loaded = Loaded(taken, list(samples), [])
    return AuditPlan.build(loaded.samples, cfg, pool=loaded.pool, ocr=ocr), loaded


def run_audit_command(options: AuditOptions | None = None, *, models: list | None = None,
                      samples: list | None = None, quiet: bool = False, **fields) -> dict:
    """The whole audit: run (resumable), summarise from the store, print every table, write the reports.
    ``fields``: options by name, for a caller without an :class:`AuditOptions` (the demo, the Python API);
    ``models``: model objects the caller holds (in place of ``--model`` specs), ``samples``: samples already made
    (in place of ``--data``); ``quiet``: no tables printed (the files are written all the same)."""
    opts = options or AuditOptions(**fields)
    opts.load_plugins()
    params = opts.model_dump(mode="json")
    if models is not None:
        params["model"] = [m.name for m in models]  # the run record names what it audited
    if samples is not None:
        params["data"] = f"python:{len(samples)} samples"
    if opts.executor not in ("local", "ray"):
        raise UsageError(f"executor must be local or ray, got {opts.executor!r}")
    from mmaudit.audit import LocalExecutor, RayExecutor, drive
    from mmaudit.data.sources import prompts_in_force
    from mmaudit.lock import RunLock
    from mmaudit.store import RunStore

    if opts.end_pgd_loss != "ce":
        console.print("[yellow]--end-pgd-loss is deprecated: use --attack end_pgd:loss=margin[/yellow]")
    placement, cfg, plan, loaded, specs = configure(opts, samples)
    if models is not None and opts.executor != "local":
        raise UsageError("models held in this process run on the local executor; give Ray model specs instead")
    if opts.executor == "ray":
        refuse_endpoints(specs, "endpoint targets need no GPU: run them with --executor local")
    out = opts.out
    # models load before anything is written
    if models is None and opts.executor == "local":  # a model behind a pipeline shares its bare one's weights
        wrapped = [s.partition("#")[0] for s in specs if "#" in s]  # with a pipeline: each bare model once
        models = load_models(wrapped or specs, placement, opts.endpoint_settings())
    if models is not None and opts.pipeline() is not None:
        models = with_bare(models, opts.pipeline(), not opts.adaptive_only)
    with RunLock(out, "mmaudit audit", opts.wait) as lock:
        if lock.previous:
            console.print(f"[yellow]took over the lock of process {lock.previous.get('pid')}, which is no longer "
                          "running[/yellow]")
        black, checks = attach(models or [], out)
        run = Invocation(RunStore(out / "results.jsonl"), "audit", params | {"endpoint_checks": checks,
            "attack_params": plan.params, "attack_strength": opts.resolved_strength(), "samples": len(plan.samples),
            "prompts": prompts_in_force(plan.samples),
            "reading_prompt": cfg.text.reading_prompt, "placement": placement.describe(), "batch_planned": cfg.batch})
        with progress_bar() as bar, budget_stop(black):
            ex = (RayExecutor(specs, plan, workers=opts.ray_workers, address=opts.ray_address, placement=placement)
                  if models is None else LocalExecutor(models, plan))
            if getattr(ex, "warning", None):
                console.print(f"[yellow]warning: {escape(ex.warning)}[/yellow]", soft_wrap=True)
            drive(ex, plan, out, loaded.errors, progress_callback(bar))
        run.finish(**usage_of(black))
        if quiet:
            from mmaudit.report.build import rebuild

            summary, paths = rebuild(out)
        else:
            summary, paths = print_summary(out)
    if not quiet:
        console.print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}  report: "
                      + "  ".join(str(p) for p in paths))
    return summary


def configure(opts: AuditOptions, samples: list | None = None):
    """An audit's placement, config, plan (wrong answers fixed), loaded data and model specs from its options: the
    command's, or those a run record kept (`audit transfer` rebuilds the run's plan from them)."""
    from mmaudit.models.load import check_spec, expand

    placement = opts.placement()
    cfg = opts.audit_config()
    plan, loaded = plan_audit(opts.data, cfg, opts.limit, opts.select, opts.seed, opts.wrong_ocr, opts.prompt_suffix,
                              samples)
    specs = expand(opts.model or ["zoo"])
    for spec in specs:
        check_spec(spec)
    if opts.pipeline() is not None:
        from mmaudit.models.channel import with_pipeline

        bare = [s for s in specs if not opts.adaptive_only and not s.startswith("endpoint:")]
        specs = bare + [with_pipeline(s, opts.channel, opts.defence) for s in specs]
    return placement, cfg, plan, loaded, specs


def with_bare(models: list, pipeline, non_adaptive: bool) -> list:
    """The models behind the pipeline, after the white-box ones bare (``non_adaptive``): the bare model's own
    perturbations, judged through the pipeline, are the non-adaptive column; its records are a bare run's."""
    from mmaudit.models.channel import behind
    from mmaudit.models.vlm import VLM

    bare = [m for m in models if non_adaptive and isinstance(m, VLM)]
    return bare + [behind(m, pipeline) for m in models]


@contextmanager
def budget_stop(black: list):
    """An endpoint target's spent budget ends the command with exit 3; its finished requests are cached."""
    from mmaudit.models.chat import BudgetExceeded

    try:
        yield
    except BudgetExceeded as e:
        console.print(f"[red]{escape(str(e))}[/red]")
        for m in black:
            console.print(f"{m.name}: {m.usage()}")
        raise typer.Exit(3) from None


def usage_of(black: list) -> dict:
    """What the run record keeps of endpoint targets: calls, cache hits, failures, tokens, cost."""
    return {"endpoint_usage": {m.name: m.usage() for m in black}} if black else {}


def print_summary(out: Path, n_boot: int | None = None, transfer_only: bool = False) -> tuple[dict, list[Path]]:
    """Rebuild the report and print every table (or only the transfer tables), the headline and the warnings."""
    from mmaudit.report import all_tables, all_warnings
    from mmaudit.report.build import rebuild
    from mmaudit.report.transfer import transfer_tables

    summary, paths = rebuild(out, n_boot)
    for title, head, rows in ([] if transfer_only else all_tables(summary)) + transfer_tables(summary):
        print_table(title, head, rows)
    if summary.get("schedule") == "union":
        from mmaudit.report.markdown import union_note

        console.print(union_note(summary))
    console.rule("Headline")
    for sentence in summary["headline"]["sentences"]:
        console.print(f"- {escape(sentence)}", soft_wrap=True)
    for warning in all_warnings(summary):
        console.print(f"[yellow]Warning: {escape(warning)}[/yellow]")
    if summary["errors"]:
        console.print(f"[yellow]{len(summary['errors'])} errors (samples that could not be audited, replies that "
                      "were no answer); see report.md[/yellow]")
    return summary, paths


def audit(options: AuditOptions, ctx: typer.Context) -> None:
    """FusionAudit: clean pass, both pathways on the clean-correct set, R0/R+/delta, RUG, OAR, layer recovery.
    A deployed model (`--model endpoint:MODEL@URL`) takes the rendered-text pathway and RUG; its pixel pathway
    comes by transfer (`mmaudit audit transfer`)."""
    if ctx.invoked_subcommand is None:
        run_audit_command(options)


audit_app.callback(invoke_without_command=True)(friendly(command_from(
    AuditOptions, audit, [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)])))


def transfer(options: TransferOptions, run: Path, to: list[str] | None = None) -> None:
    """Show every saved adversarial image of RUN to each target (the run's models and --to): the source x target
    transfer matrix, and each target's black-box residual risk (its rendered-text attacks and every transferred
    pixel attack, R+ as for a white-box model)."""
    run_transfer_command(run, to, options)


audit_app.command("transfer")(friendly(command_from(TransferOptions, transfer, [
    inspect.Parameter("run", inspect.Parameter.KEYWORD_ONLY, annotation=Path, default=typer.Argument(
        ..., help="An audit's run folder (its adversarial images and its plan are reused).")),
    inspect.Parameter("to", inspect.Parameter.KEYWORD_ONLY, annotation=list[str], default=typer.Option(
        None, "--to", help="Further targets, any --model spec: a checkpoint, or 'endpoint:MODEL@URL' (a deployed "
        "VLM); default: the run's own models only."))], exclude=("batch",))))


def run_transfer_command(run: Path, to: list[str] | None = None, options: TransferOptions | None = None) -> dict:
    """`mmaudit audit transfer` as a function (the demo calls it after its audit); returns the summary."""
    opts = options or TransferOptions()
    params = opts.model_dump(mode="json", exclude={"batch"}) | {"run": str(run), "to": to}
    from mmaudit.audit import LocalExecutor
    from mmaudit.audit.transfer import drive_transfer
    from mmaudit.errors import FolderError
    from mmaudit.lock import RunLock
    from mmaudit.manifest import invocations
    from mmaudit.models.load import expand
    from mmaudit.store import RunStore

    if not (run / "results.jsonl").is_file():
        raise FolderError(run, "run", "not an audit run folder (no results.jsonl)")
    store = RunStore(run / "results.jsonl")
    audits = [r for r in invocations(store) if r["command"] == "audit"]
    if not audits:
        raise UsageError(f"{run}: no audit run record; transfer rebuilds the audit's plan from its parameters")
    where = opts.model_dump(include=set(PlacementOptions.model_fields) - {"batch"})
    opts.load_plugins()
    audit_opts = AuditOptions.model_validate(audits[-1]["params"] | where)
    audit_opts.load_plugins()  # the audit's own plugins: its attacks and models are theirs
    if audit_opts.reference != "label":
        raise UsageError(f"{run}: an audit judged against the models' own answers (--reference self) has no shared "
                         "clean-correct set to transfer over; transfer needs --reference label")
    placement, cfg, plan, loaded, specs = configure(audit_opts)
    targets = list(dict.fromkeys(specs + expand(to or [])))
    models = load_models(targets, placement, opts.endpoint_settings())
    surrogates = surrogates_of(opts, dict(zip(targets, models)), specs, placement)
    pipeline = opts.pipeline()
    if pipeline is not None:  # every target is shown what the pipeline makes of each image
        if audit_opts.pipeline() is not None:
            raise UsageError(f"{run}: its models are already behind --channel/--defence; transfer --channel puts "
                             "bare targets behind one")
        from mmaudit.models.channel import behind

        models = [behind(m, pipeline) for m in models]
        targets = [m.name for m in models]
    with RunLock(run, "mmaudit audit transfer", opts.wait):
        black, checks = attach(models, run)
        crafted = [surrogates.attack(e, plan).params() for e, _ in surrogates.ensembles] if surrogates else None
        inv = Invocation(store, "audit transfer", params | {"targets": targets, "surrogate_params": crafted,
                                                            "endpoint_checks": checks})
        with progress_bar() as bar, budget_stop(black):
            drive_transfer(LocalExecutor(models, plan), plan, run, progress_callback(bar), surrogates)
        inv.finish(**usage_of(black))
        summary, paths = print_summary(run, opts.n_boot, transfer_only=True)
    console.print("report: " + "  ".join(str(p) for p in paths))
    return summary


def surrogates_of(opts: TransferOptions, loaded: dict, run_specs: list[str], placement):
    """The ensembles `--surrogates` asks for: the encoders named (a loaded target's own tower where it is one), or
    leave-one-out over the run's models; None without the option."""
    if not opts.surrogates:
        return None
    from mmaudit.audit.transfer import Surrogates
    from mmaudit.models.encoders import Ensemble, load_encoder, tower
    from mmaudit.models.load import expand
    from mmaudit.pathways import registry
    from mmaudit.pathways.pixel.surrogate import FEATURES, LOSSES

    def encoder(spec: str):
        return tower(loaded[spec]) if spec in loaded else load_encoder(spec, placement)

    if opts.surrogates == "leave-one-out":
        if len(run_specs) < 2:
            raise UsageError("--surrogates leave-one-out needs a run of at least two models")
        encoders = {spec: encoder(spec) for spec in run_specs}
        ensembles = [(Ensemble(tuple(e for s, e in encoders.items() if s != spec)), (encoders[spec].fingerprint,))
                     for spec in run_specs]
    else:
        ensembles = [(Ensemble(tuple(encoder(s) for s in expand(parse_list(opts.surrogates)))), None)]
    scale = tuple(parse_list(opts.crop_scale, float))
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise UsageError(f"--crop-scale {opts.crop_scale!r}: two area fractions LOW,HIGH with 0 < LOW <= HIGH <= 1")
    for flag, value, allowed in (("--surrogate-target", opts.surrogate_target, registry.names("text")),
                                 ("--surrogate-loss", opts.surrogate_loss, LOSSES),
                                 ("--surrogate-features", opts.surrogate_features, FEATURES)):
        if value not in allowed:
            raise UsageError(f"{flag} {value!r}: one of {', '.join(allowed)}")
    return Surrogates(ensembles, eps=parse_eps(opts.surrogate_eps), steps=opts.surrogate_steps, crop_scale=scale,
                      target=opts.surrogate_target, loss=opts.surrogate_loss, features=opts.surrogate_features,
                      channel=opts.channel, defence=opts.defence)


def sweep(options: SweepOptions) -> None:
    """MANTIS stability: seeds x steps x eps, median std across seeds, 40->50 step gain, level order per eps."""
    from mmaudit.audit.sweep import SweepConfig, run_sweep
    from mmaudit.data.sources import load_data, prompts_in_force
    from mmaudit.lock import RunLock
    from mmaudit.report.sweep_page import rebuild_sweep, sweep_lines, sweep_tables
    from mmaudit.store import RunStore

    opts = options
    opts.load_plugins()
    placement = opts.placement()
    cfg = SweepConfig(seeds=parse_list(opts.seeds, int), steps=parse_list(opts.steps, int),
                      eps=[parse_eps(e) for e in parse_list(opts.eps)], batch=placement.batch(opts.batch),
                      early_stop=not opts.paper_protocol)
    refuse_endpoints(opts.model, "the MANTIS sweep needs gradients; audit an endpoint with `mmaudit audit`")
    loaded = load_data(opts.data, prompt_suffix=opts.prompt_suffix)
    models = load_models(opts.model, placement)
    with RunLock(opts.out, "mmaudit audit sweep", opts.wait):
        run = Invocation(RunStore(opts.out / "results.jsonl"), "audit sweep",
                         opts.model_dump(mode="json") | {"seeds": cfg.seeds, "steps": cfg.steps, "eps": cfg.eps,
                                                         "prompts": prompts_in_force(loaded.samples),
                                                         "placement": placement.describe()})
        with progress_bar() as bar:
            run_sweep(models, loaded.samples, opts.out, cfg, progress=progress_callback(bar), pool=loaded.pool,
                      ocr=wrong_ocr_reader("auto"))
        run.finish()
        s, paths = rebuild_sweep(opts.out)
    head, rows = sweep_tables(s)
    print_table(f"MANTIS ASR % (mean ± std over seeds {s['seeds']})", head, rows)
    for line in sweep_lines(s):
        console.print(line)
    console.print(f"sweep: {opts.out / 'sweep.json'}  report: " + "  ".join(str(p) for p in paths))


audit_app.command("sweep")(friendly(command_from(SweepOptions, sweep)))
