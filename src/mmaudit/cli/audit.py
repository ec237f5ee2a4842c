"""`mmaudit audit` (both pathways, diagnostics, report) and `mmaudit audit sweep` (MANTIS stability)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.markup import escape

from mmaudit.cli.common import (
    console,
    flag,
    friendly,
    parse_eps,
    parse_list,
    parse_price,
    print_table,
    progress_bar,
    progress_callback,
    wait_option,
)
from mmaudit.errors import UsageError
from mmaudit.manifest import Invocation, command_params

audit_app = typer.Typer(help="FusionAudit: white-box audit of VLMs along the pixel and rendered-text pathways.")
ALL = "vis_pgd,end_pgd,mantis,typo_evid,nat_evid"


def load_models(specs: list[str], placement=None, endpoint: dict | None = None):
    from mmaudit.models.load import expand, load_model

    return [load_model(s, placement, endpoint) for s in expand(specs)]


def endpoint_settings(price: str | None, budget: float | None, concurrency: int, max_tokens: int | None) -> dict:
    """The chat client's settings for endpoint targets (`--model endpoint:MODEL@URL`)."""
    return {"price_per_1k": parse_price(price), "budget": budget, "concurrency": concurrency, "max_tokens": max_tokens}


def attach(models: list, out: Path) -> list:
    """Endpoint targets keep their requests in the run folder (call under the run's lock); the black-box ones."""
    black = [m for m in models if getattr(m, "black_box", False)]
    for m in black:
        m.cache_in(out)
    return black


def refuse_endpoints(specs: list[str], why: str) -> None:
    bad = [s for s in specs if s.startswith("endpoint:")]
    if bad:
        raise UsageError(f"--model {bad[0]}: {why}")


# An endpoint target's chat client: the same options for `audit` and `audit transfer`.
PRICE = typer.Option(None, help="Endpoint targets: PROMPT,COMPLETION price per 1k tokens (for --budget and the "
                     "run record).")
BUDGET = typer.Option(None, help="Endpoint targets: stop starting requests once the cost reaches this (exit 3; "
                      "finished requests are cached, a rerun resumes).")
CONCURRENCY = typer.Option(8, help="Endpoint targets: requests in flight.")
MAX_TOKENS = typer.Option(None, help="Endpoint targets: the reply's token limit (default: the audit's answer "
                          "length, 16, as for every model).")

# Where a model runs: the same options for `audit` and `audit sweep` (and through them, every Ray actor).
DEVICE = typer.Option("auto", help="auto (the GPU when there is one, else the CPU), cpu, cuda or cuda:N.")
DTYPE = typer.Option("auto", help="auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16 or float16. The "
                     "attack's perturbation stays float32 in pixel space; records of different precisions never mix.")
DEVICE_MAP = typer.Option(None, help="A transformers device map for a model larger than one card, e.g. auto.")
MAX_PIXELS = typer.Option(None, help="Qwen family: the processor's pixel budget per image (sets its token count, "
                          "hence memory); default the checkpoint's.")
CHECKPOINT = typer.Option("auto", help="Activation checkpointing in attacks: auto (mlp+norms on a GPU, none on "
                          "CPU), none, mlp (recompute the MLP blocks), mlp+norms (and the normalisations) or layers "
                          "(recompute every layer).")
BATCH = typer.Option("auto", help="Samples per batch: a number, or auto (64 to start with on a GPU, halved when "
                     "memory runs out and the size that fits remembered; 32 on CPU).")


def placement_of(device: str, dtype: str, device_map: str | None, max_pixels: int | None, checkpoint: str):
    from mmaudit.models.load import Placement

    return Placement(device=device, dtype=dtype, device_map=device_map, max_pixels=max_pixels, checkpoint=checkpoint)


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
               wrong_ocr: str = "auto", prompt_suffix: str | None = None):
    """Load ``--data`` and fix the audit's plan (wrong answers drawn from everything loaded): (plan, loaded)."""
    from mmaudit.audit.plan import AuditPlan
    from mmaudit.data.sources import load_data

    ocr = wrong_ocr_reader(wrong_ocr)
    loaded = load_data(data, limit, select, seed, prompt_suffix)
    return AuditPlan.build(loaded.samples, cfg, pool=loaded.pool, ocr=ocr), loaded


def make_editor(spec: str):
    """'layout' (embedded), 'http:URL' (an image-edit endpoint) or 'diffusers:MODEL' (needs weights, a GPU)."""
    from mmaudit.pathways.text import LayoutEditor
    from mmaudit.pathways.text.generative import GenerativeEditor, diffusers_backend, http_backend

    if spec == "layout":
        return LayoutEditor()
    kind, _, target = spec.partition(":")
    if kind == "http" and target:
        return GenerativeEditor(http_backend(target), name=f"http:{target}")
    if kind == "diffusers" and target:
        return GenerativeEditor(diffusers_backend(target), name=f"diffusers:{target}")
    raise UsageError(f"unknown editor {spec!r}; use layout, http:URL or diffusers:MODEL")


def run_audit_command(
    model: list[str] | None = None, data: str = "synthetic", attacks: str = ALL, eps: str = "8/255", steps: int = 40,
    alpha: float | None = None, seed: int = 0, limit: int | None = None, batch: str | int = "auto",
    paper_protocol: bool = False, downscale: int | None = None, n_boot: int = 10_000, out: Path = Path("runs/audit"),
    typo_position: str = "bottom", max_chars: int = 16, editor: str = "layout", oar_layers: str | None = None,
    recovery: int = 40, recovery_positions: str = "image", ocr_limit: int = 48, schedule: str = "full",
    select: int | None = None, executor: str = "local", ray_workers: int = 1, ray_address: str | None = None,
    wrong_ocr: str = "auto", prompt_suffix: str | None = None, device: str = "auto", dtype: str = "auto",
    device_map: str | None = None, max_pixels: int | None = None, checkpoint: str = "auto", reference: str = "label",
    price: str | None = None, budget: float | None = None, concurrency: int = 8, max_tokens: int | None = None,
    wait: bool = False,
) -> dict:
    """The whole audit: run (resumable), summarise from the store, print every table, write the reports."""
    params = command_params(dict(locals()))
    if executor not in ("local", "ray"):
        raise UsageError(f"executor must be local or ray, got {executor!r}")
    from mmaudit.audit import LocalExecutor, RayExecutor, drive
    from mmaudit.data.sources import prompts_in_force
    from mmaudit.lock import RunLock
    from mmaudit.store import RunStore

    placement, cfg, plan, loaded, specs = configure(params)
    if executor == "ray":
        refuse_endpoints(specs, "endpoint targets need no GPU: run them with --executor local")
    # models load before anything is written
    models = load_models(specs, placement, endpoint_settings(price, budget, concurrency, max_tokens)) \
        if executor == "local" else None
    with RunLock(out, "mmaudit audit", wait) as lock:
        if lock.previous:
            console.print(f"[yellow]took over the lock of process {lock.previous.get('pid')}, which is no longer "
                          "running[/yellow]")
        black = attach(models or [], out)
        run = Invocation(RunStore(out / "results.jsonl"), "audit", params | {
            "attack_params": plan.params, "samples": len(plan.samples), "prompts": prompts_in_force(plan.samples),
            "reading_prompt": cfg.text.reading_prompt, "placement": placement.describe(), "batch_planned": cfg.batch})
        with progress_bar() as bar, budget_stop(black):
            ex = (RayExecutor(specs, plan, workers=ray_workers, address=ray_address, placement=placement)
                  if models is None else LocalExecutor(models, plan))
            drive(ex, plan, out, loaded.errors, progress_callback(bar))
        run.finish(**usage_of(black))
        summary, paths = print_summary(out)
    console.print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}  report: "
                  + "  ".join(str(p) for p in paths))
    return summary


def configure(p: dict):
    """An audit's placement, config, plan (wrong answers fixed), loaded data and model specs from its parameters:
    the command's, or those a run record kept (`audit transfer` rebuilds the run's plan from them)."""
    from mmaudit.audit import AuditConfig
    from mmaudit.models.load import check_spec, expand
    from mmaudit.pathways.text.runner import TextRunConfig

    placement = placement_of(p["device"], p["dtype"], p["device_map"], p["max_pixels"], p["checkpoint"])
    text = TextRunConfig(oar_layers=tuple(parse_list(p["oar_layers"], int)) if p["oar_layers"] else None)
    cfg = AuditConfig(attacks=parse_list(p["attacks"]), eps=parse_eps(p["eps"]), steps=p["steps"], alpha=p["alpha"],
                      seed=p["seed"], batch=placement.batch(p["batch"]), early_stop=not p["paper_protocol"],
                      downscale=p["downscale"], typo_position=p["typo_position"], max_chars=p["max_chars"],
                      editor=make_editor(p["editor"]), text=text, recovery=p["recovery"],
                      recovery_positions=p["recovery_positions"], ocr_limit=p["ocr_limit"], schedule=p["schedule"],
                      reference=p.get("reference", "label"))
    plan, loaded = plan_audit(p["data"], cfg, p["limit"], p["select"], p["seed"], p["wrong_ocr"], p["prompt_suffix"])
    specs = expand(p["model"] or ["zoo"])
    for spec in specs:
        check_spec(spec)
    return placement, cfg, plan, loaded, specs


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
    from mmaudit.report import all_tables
    from mmaudit.report.build import rebuild
    from mmaudit.report.transfer import transfer_tables

    summary, paths = rebuild(out, n_boot)
    for title, head, rows in ([] if transfer_only else all_tables(summary)) + transfer_tables(summary):
        print_table(title, head, rows)
    if summary.get("schedule") == "union":
        from mmaudit.report.markdown import UNION_NOTE

        console.print(UNION_NOTE)
    console.rule("Headline")
    for sentence in summary["headline"]["sentences"]:
        console.print(f"- {escape(sentence)}", soft_wrap=True)
    for warning in summary["validity"]["warnings"]:
        console.print(f"[yellow]Warning: {escape(warning)}[/yellow]")
    if summary["errors"]:
        console.print(f"[yellow]{len(summary['errors'])} errors (samples that could not be audited, replies that "
                      "were no answer); see report.md[/yellow]")
    return summary, paths


@audit_app.callback(invoke_without_command=True)
@friendly
def audit(
    ctx: typer.Context,
    model: list[str] = typer.Option(["zoo"], help="'zoo', 'zoo:L2', one of the paper's models by short name "
                                    "('Qwen2.5-VL-3B'), a hub id ('Qwen/Qwen2.5-VL-3B-Instruct') or a local "
                                    "checkpoint folder; append @L1/@L2/@L3 to set its fusion level; or "
                                    "'endpoint:MODEL@URL', a deployed VLM behind an OpenAI-compatible endpoint "
                                    "(black-box: the rendered-text pathway and RUG)."),
    data: str = typer.Option("synthetic", help="'synthetic[:N]', a JSONL of samples, or 'chartqa:FILE.json,"
                             "docvqa:FILE.json,mme:DIR'."),
    select: int = typer.Option(None, help="A balanced seeded draw of N questions over the data sources (paper: "
                               "1500)."),
    attacks: str = typer.Option(ALL, help="Comma-separated attacks of both pathways."),
    eps: str = typer.Option("8/255", help="L-infinity radius in [0, 1] pixel units, e.g. 8/255."),
    steps: int = typer.Option(40, help="PGD steps."),
    alpha: float = typer.Option(None, help="Step size (default eps/8)."),
    seed: int = typer.Option(0, help="Random-start and bootstrap seed."),
    limit: int = typer.Option(None, help="Audit only the first N samples."),
    batch: str = BATCH,
    paper_protocol: bool = flag("--paper-protocol", help="No early stopping: the full fixed budget."),
    downscale: int = typer.Option(None, help="Memory fallback: optimise noise at this side length, then upsample."),
    n_boot: int = typer.Option(10_000, help="Bootstrap replicates."),
    out: Path = typer.Option(Path("runs/audit"), help="Run folder: results.jsonl (the store), adv/, report.md."),
    typo_position: str = typer.Option("bottom", help="Typo-Evid's fixed region: bottom or top."),
    max_chars: int = typer.Option(16, help="L: longest overlaid wrong answer, in characters."),
    editor: str = typer.Option("layout", help="Nat-Evid editor: layout, http:URL or diffusers:MODEL."),
    oar_layers: str = typer.Option(None, help="Decoder layers averaged for OAR, e.g. '2,3' (default: later half)."),
    recovery: int = typer.Option(40, help="Layer recovery on the first N End-PGD flips per model (0: off)."),
    recovery_positions: str = typer.Option("image", help="Positions patched in layer recovery: image or prompt."),
    ocr_limit: int = typer.Option(48, help="Chart/document samples for the OCR evidence check (0: off)."),
    executor: str = typer.Option("local", help="local, or ray: (model x sample shard) units over Ray actors, "
                                 "one per GPU, retried when a worker dies; results land in this run's store."),
    ray_workers: int = typer.Option(1, help="Ray actors per model."),
    ray_address: str = typer.Option(None, help="Ray cluster address (default $RAY_ADDRESS, else a local Ray)."),
    schedule: str = typer.Option("full", help="full: every attack on all of C; union: AutoAttack-style, each pixel "
                                 "attack only on what earlier ones left (R0/R+/δ exact, fewer passes)."),
    wrong_ocr: str = typer.Option("auto", help="Wrong answers for text labels may come from the image's OCR text "
                                  "(images without layout metadata): auto (if rapidocr is installed), on, off. "
                                  "Inspect them first with `mmaudit data wrong`."),
    prompt_suffix: str = typer.Option(None, help="The instruction every question is asked with, on a line after it "
                                      "(default: each dataset's own: ChartQA and DocVQA 'Answer the question using "
                                      "a single word or phrase.', MME none, a JSONL row's 'instruction'); '' asks "
                                      "the bare question. Part of every record's key."),
    device: str = DEVICE,
    dtype: str = DTYPE,
    device_map: str = DEVICE_MAP,
    max_pixels: int = MAX_PIXELS,
    checkpoint: str = CHECKPOINT,
    reference: str = typer.Option("label", help="label: flips are judged against the dataset's answer; self: "
                                  "against the model's own clean answer (a label-free audit of your own images; "
                                  "C is every question the model answered)."),
    price: str = PRICE,
    budget: float = BUDGET,
    concurrency: int = CONCURRENCY,
    max_tokens: int = MAX_TOKENS,
    wait: bool = wait_option(),
) -> None:
    """FusionAudit: clean pass, both pathways on the clean-correct set, R0/R+/delta, RUG, OAR, layer recovery.
    A deployed model (`--model endpoint:MODEL@URL`) takes the rendered-text pathway and RUG; its pixel pathway
    comes by transfer (`mmaudit audit transfer`)."""
    if ctx.invoked_subcommand is not None:
        return
    run_audit_command(**{k: v for k, v in locals().items() if k != "ctx"})


@audit_app.command("transfer")
@friendly
def transfer(
    run: Path = typer.Argument(..., help="An audit's run folder (its adversarial images and its plan are reused)."),
    to: list[str] = typer.Option(None, "--to", help="Further targets, any --model spec: a checkpoint, or "
                                 "'endpoint:MODEL@URL' (a deployed VLM); default: the run's own models only."),
    n_boot: int = typer.Option(None, help="Bootstrap replicates (default: the audit's)."),
    price: str = PRICE,
    budget: float = BUDGET,
    concurrency: int = CONCURRENCY,
    max_tokens: int = MAX_TOKENS,
    device: str = DEVICE,
    dtype: str = DTYPE,
    device_map: str = DEVICE_MAP,
    max_pixels: int = MAX_PIXELS,
    checkpoint: str = CHECKPOINT,
    wait: bool = wait_option(),
) -> None:
    """Show every saved adversarial image of RUN to each target (the run's models and --to): the source x target
    transfer matrix, and each target's black-box residual risk (its rendered-text attacks and every transferred
    pixel attack, R+ as for a white-box model)."""
    run_transfer_command(**locals())


def run_transfer_command(run: Path, to: list[str] | None = None, n_boot: int | None = None, price: str | None = None,
                         budget: float | None = None, concurrency: int = 8, max_tokens: int | None = None,
                         device: str = "auto", dtype: str = "auto", device_map: str | None = None,
                         max_pixels: int | None = None, checkpoint: str = "auto", wait: bool = False) -> dict:
    """`mmaudit audit transfer` as a function (the demo calls it after its audit); returns the summary."""
    params = command_params(dict(locals()))
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
    p = audit_defaults() | audits[-1]["params"] | {k: params[k] for k in ("device", "dtype", "device_map",
                                                                           "max_pixels", "checkpoint")}
    if p.get("reference", "label") != "label":
        raise UsageError(f"{run}: an audit judged against the models' own answers (--reference self) has no shared "
                         "clean-correct set to transfer over; transfer needs --reference label")
    placement, cfg, plan, loaded, specs = configure(p)
    targets = list(dict.fromkeys(specs + expand(to or [])))
    models = load_models(targets, placement, endpoint_settings(price, budget, concurrency, max_tokens))
    with RunLock(run, "mmaudit audit transfer", wait):
        black = attach(models, run)
        inv = Invocation(store, "audit transfer", params | {"targets": targets})
        with progress_bar() as bar, budget_stop(black):
            drive_transfer(LocalExecutor(models, plan), plan, run, progress_callback(bar))
        inv.finish(**usage_of(black))
        summary, paths = print_summary(run, n_boot, transfer_only=True)
    console.print("report: " + "  ".join(str(p) for p in paths))
    return summary


def audit_defaults() -> dict:
    """run_audit_command's defaults: a run record from before an option existed still configures a plan."""
    import inspect

    return {k: v.default for k, v in inspect.signature(run_audit_command).parameters.items()}


@audit_app.command("sweep")
@friendly
def sweep(
    model: list[str] = typer.Option(["zoo"], help="Models, as for `mmaudit audit`."),
    data: str = typer.Option("synthetic:16", help="Samples (the paper uses 100 per dataset)."),
    seeds: str = typer.Option("0,1,2", help="Random-start seeds."),
    steps: str = typer.Option("10,20,30,40,50", help="Step budgets."),
    eps: str = typer.Option("2/255,4/255,8/255", help="Radii."),
    batch: str = BATCH,
    paper_protocol: bool = flag("--paper-protocol", help="No early stopping."),
    out: Path = typer.Option(Path("runs/sweep"), help="Run folder (resumable store)."),
    prompt_suffix: str = typer.Option(None, help="As for `mmaudit audit`."),
    device: str = DEVICE,
    dtype: str = DTYPE,
    device_map: str = DEVICE_MAP,
    max_pixels: int = MAX_PIXELS,
    checkpoint: str = CHECKPOINT,
    wait: bool = wait_option(),
) -> None:
    """MANTIS stability: seeds x steps x eps, median std across seeds, 40->50 step gain, level order per eps."""
    params = command_params(dict(locals()))
    from mmaudit.audit.sweep import SweepConfig, run_sweep
    from mmaudit.data.sources import load_data, prompts_in_force
    from mmaudit.lock import RunLock
    from mmaudit.report.sweep_page import rebuild_sweep, sweep_lines, sweep_tables
    from mmaudit.store import RunStore

    placement = placement_of(device, dtype, device_map, max_pixels, checkpoint)
    cfg = SweepConfig(seeds=parse_list(seeds, int), steps=parse_list(steps, int),
                      eps=[parse_eps(e) for e in parse_list(eps)], batch=placement.batch(batch),
                      early_stop=not paper_protocol)
    refuse_endpoints(model, "the MANTIS sweep needs gradients; audit an endpoint with `mmaudit audit`")
    loaded = load_data(data, prompt_suffix=prompt_suffix)
    models = load_models(model, placement)
    with RunLock(out, "mmaudit audit sweep", wait):
        run = Invocation(RunStore(out / "results.jsonl"), "audit sweep",
                         params | {"seeds": cfg.seeds, "steps": cfg.steps, "eps": cfg.eps,
                                   "prompts": prompts_in_force(loaded.samples), "placement": placement.describe()})
        with progress_bar() as bar:
            run_sweep(models, loaded.samples, out, cfg, progress=progress_callback(bar), pool=loaded.pool,
                      ocr=wrong_ocr_reader("auto"))
        run.finish()
        s, paths = rebuild_sweep(out)
    head, rows = sweep_tables(s)
    print_table(f"MANTIS ASR % (mean ± std over seeds {s['seeds']})", head, rows)
    for line in sweep_lines(s):
        console.print(line)
    console.print(f"sweep: {out / 'sweep.json'}  report: " + "  ".join(str(p) for p in paths))
