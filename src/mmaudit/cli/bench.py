"""`mmaudit bench run`: the QIMG-7 evaluation (branches, defences, judge) and its tables and report."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from mmaudit.cli.common import (
    console,
    flag,
    parse_price,
    print_table,
    progress_bar,
    progress_callback,
    wait_option,
)
from mmaudit.errors import UsageError
from mmaudit.jsonout import dumps
from mmaudit.manifest import Invocation, command_params

EMBEDDED_LIMIT = 4  # questions the embedded model gets by default: 64 rows fit in minutes on 2 CPU cores


def parse_budgets(text: str | None, base: dict) -> dict:
    """'answer=512,resolver=1024' over the defaults; components: answer, gate, resolver, judge."""
    from mmaudit.rag.evaluate.config import COMPONENTS

    out = dict(base)
    for part in filter(None, (x.strip() for x in (text or "").split(","))):
        name, _, value = part.partition("=")
        if name not in COMPONENTS or not value.isdigit():
            raise UsageError(f"--max-tokens: {part!r} is not COMPONENT=N with COMPONENT in {COMPONENTS}")
        out[name] = int(value)
    return out


def mini_folder(folder: Path | None) -> Path:
    """The benchmark folder; none: the bundled mini benchmark, built into runs/bench on first use."""
    if folder is not None:
        return folder
    folder = Path("runs/bench")
    if not list(folder.glob("*_qimg7_mm_regimes_*.jsonl")):
        from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
        from mmaudit.rag.construct.mini import mini_inputs

        build_benchmark(mini_inputs(), folder, BuildConfig())
    return folder


def chat_model(spec: str | None, cache: Path, concurrency: int = 8, cost: dict | None = None):
    """The chat model a spec names (:mod:`mmaudit.models.chat.backends`: 'embedded', 'endpoint:MODEL@URL' or a
    registered backend's 'NAME:ARGS'), its calls cached in ``cache``."""
    from mmaudit.models.chat.backends import make_chat

    return make_chat(spec, cache, concurrency=concurrency, cost=cost or {})


PROBED: dict[tuple[str, str], dict] = {}  # (endpoint, model) -> its capabilities, probed once per process


def probe_endpoint(chat, vision: bool = False) -> dict | None:
    """An endpoint chat model's capabilities, probed before any work (printed in one line); its structured form is
    set from them. With ``vision`` the endpoint is also shown the image canary. None for the embedded model."""
    from mmaudit.data.images import png_data_url
    from mmaudit.models.chat import image_message
    from mmaudit.models.chat.probe import canary, probe

    if not getattr(chat, "probes", False):
        return None
    key = (chat.base_url or "", chat.model)
    if key not in PROBED or (vision and "canary" not in PROBED[key]):
        caps = probe(chat, images=vision)
        if not caps.reachable:
            raise UsageError(f"{chat.model} at {chat.base_url}: the endpoint does not answer ({caps.reasons['chat']})")
        found = {"capabilities": caps.as_dict(), "line": caps.line()}
        if vision:
            seen = canary(lambda ims, ps: chat.chat_many([image_message(png_data_url(im), p)
                                                          for im, p in zip(ims, ps)]))
            found |= {"canary": vars(seen), "canary_line": seen.line()}
        PROBED[key] = found
        console.print(escape(found["line"] + (f"; {found['canary_line']}" if vision else "")), soft_wrap=True)
    chat.structured = PROBED[key]["capabilities"]["structured"]
    return PROBED[key]


def stack_models(out: Path, spec: str | None, judge_spec: str | None, concurrency: int, cost: dict,
                 max_tokens: str | None, judge=None):
    """(chat, judge, stack name, budgets, evidence cut, notes) for 'MODEL@URL' (an endpoint) or None / 'embedded'
    (the offline SmolLM2). ``judge`` (a model) overrides ``judge_spec``: one judge over several stacks."""
    from mmaudit.models.chat.backends import parse
    from mmaudit.rag.evaluate.config import EMBEDDED_BUDGET, ENDPOINT_BUDGET

    cache = out / "calls.jsonl"
    chat = chat_model(spec, cache, concurrency, cost)
    compact = getattr(chat, "evidence_cut", None) or {}
    if compact:  # a small model the bench cuts the evidence for, and says so
        notes, name, budgets = [f"{chat.notice} Evidence is cut to {compact['passages']} passages of "
                                f"{compact['words']} words for it."], chat.stack_name, EMBEDDED_BUDGET
    else:
        notes, name, budgets = [], getattr(chat, "model", chat.name).replace("/", "_"), ENDPOINT_BUDGET
    if judge is None and judge_spec:
        kind, args, _ = parse(judge_spec)
        if kind == "endpoint" and "@" not in args:  # a judge without a URL is asked at the stack's endpoint
            judge_spec = f"endpoint:{args}@{parse(spec)[1].partition('@')[2]}"
        judge = chat_model(judge_spec, cache, concurrency, cost)
    return chat, judge or chat, name, parse_budgets(max_tokens, budgets), compact, notes


def run_stack(folder: Path, out: Path, chat, judge, cfg, notes: list[str], budget: float | None,
              prices: tuple[float, float]) -> dict:
    """One stack: run it, return summary.json's block (its tables come from the rebuild). Raises typer.Exit(3)
    when the budget is spent."""
    from mmaudit.models.chat import BudgetExceeded
    from mmaudit.rag.evaluate.run import run_bench, structured_mode

    try:
        models = [chat] + ([judge] if judge is not chat else [])

        def counts() -> dict:
            return {"requests answered": sum(usage_of(m).calls for m in models),
                    "reused (cache, in flight)": sum(usage_of(m).cached for m in models),
                    "failed": sum(usage_of(m).failed for m in models)}

        with progress_bar() as bar:
            summary = run_bench(folder, chat, out, judge, cfg, progress=progress_callback(bar, counts))
    except BudgetExceeded as e:
        console.print(f"[yellow]stopped: {e}[/yellow]")
        raise typer.Exit(3) from None
    notes = notes + [f"Full-MM input: {summary['full_mm_input']}"
                     + (f", {summary['images_sent']} images sent at most {cfg.image_size} px"
                        f" ({summary['images_unloadable']} not loadable: metadata only)" if cfg.vision else
                        " (the model has no vision here)") + f"; Parametric generated {cfg.parametric}"
                     f" ({summary['parametric_requests']} requests).",
                     f"Structured outputs: {summary['structured_output']}"
                     + (f"; judge: {structured_mode(judge)}" if judge is not chat else "") + "."]
    usage = {"answer_model": usage_of(chat).as_dict()} | ({"judge_model": usage_of(judge).as_dict()}
                                                          if judge is not chat else {})
    summary |= {"notes": notes, "usage": usage, "price_per_1k": list(prices), "budget": budget,
                "judge": getattr(judge, "name", "")}
    return summary


def bench_run(
    folder: Path = typer.Option(None, help="A QIMG-7 folder (regime JSONL + images); default: build the bundled "
                                "mini benchmark into runs/bench."),
    out: Path = typer.Option(Path("runs/bench-run"), help="Run folder: calls cache, judged files, report."),
    endpoint: str = typer.Option(None, help="OpenAI-compatible base URL (vLLM, llama.cpp, Ollama, an API)."),
    model: str = typer.Option(None, help="Model name at --endpoint; or, without --endpoint, a chat model spec: "
                              "endpoint:MODEL@URL, embedded, or a registered backend's NAME:ARGS; none: the embedded "
                              "SmolLM2 model."),
    judge_model: str = typer.Option(None, help="Judge model at the endpoint (default: the answer model)."),
    judge: str = typer.Option(None, "--judge", help="A fixed judge 'MODEL@URL' apart from the generator "
                              "('embedded' for the offline model): Table 3's protocol."),
    stack: list[str] = typer.Option(None, "--stack", help="NAME=MODEL@URL, repeated: several generator/gate "
                                    "stacks in one run, all graded by --judge ('NAME=embedded' for the offline "
                                    "model). One block per stack."),
    concurrency: int = typer.Option(8, help="Concurrent requests to the endpoint."),
    vision: bool = flag("--vision", help="Full-MM sends the image's pixels (the endpoint's model sees images); "
                                "without it a text-only model gets the image's OCR text."),
    image_size: int = typer.Option(768, help="Longest side, in pixels, of the image Full-MM sends."),
    image_detail: str = typer.Option("auto", help="OpenAI image detail: auto, low, high, or '' to leave it out."),
    parametric: str = typer.Option("per-row", help="per-row (the paper: one Parametric generation per benchmark "
                                   "row) or per-question (one, reused over the 16 regimes)."),
    token_budgets: str = typer.Option(None, help="Token budgets per component, e.g. 'answer=512,gate=256,"
                                      "resolver=768,judge=256' (those are the endpoint defaults)."),
    max_tokens: str = typer.Option(None, hidden=True, help="Deprecated: --token-budgets."),
    price: str = typer.Option(None, help="PROMPT,COMPLETION price per 1k tokens, for the cost in summary.json."),
    budget: float = typer.Option(None, help="Stop cleanly once the cost reaches this (rerun to resume)."),
    limit: int = typer.Option(None, help="Only the first N questions."),
    n_boot: int = typer.Option(10_000, help="Bootstrap replicates."),
    seed: int = typer.Option(0),
    wait: bool = wait_option(),
) -> None:
    """Branches (Parametric, Text-only, Full-MM), defences, blinded judge; main and diagnostic tables."""
    params = command_params(dict(locals()))
    from mmaudit.lock import RunLock
    from mmaudit.rag.evaluate.config import PARAMETRIC_MODES
    from mmaudit.rag.evaluate.run import load_rows

    if parametric not in PARAMETRIC_MODES:
        raise UsageError(f"--parametric must be one of {PARAMETRIC_MODES}")
    prices = parse_price(price)
    if stack:
        specs = []
        for item in stack:
            name, sep, spec = item.partition("=")
            if not sep or not name.strip():
                raise UsageError(f"--stack {item!r}: expected NAME=MODEL@URL or NAME=embedded")
            specs.append((name.strip(), spec.strip()))
    else:
        specs = [(None, stack_spec(model, endpoint))]
    if folder is not None:
        load_rows(folder)  # a folder without rows is refused before anything is written
    with RunLock(out, "mmaudit bench run", wait):
        folder = mini_folder(folder)
        run_bench_command(params, folder, out, specs, prices, locals())


def budgets_option(opts: dict) -> str | None:
    """``--token-budgets`` (``--max-tokens``, its older name here, with a note: in `audit` it is one number)."""
    if opts.get("max_tokens"):
        console.print("[yellow]--max-tokens is deprecated in bench commands: use --token-budgets[/yellow]")
    return opts.get("token_budgets") or opts.get("max_tokens")


def usage_of(chat):
    """A chat model's calls, tokens and cost (a backend that keeps none: all zero)."""
    from mmaudit.models.chat.endpoint import Usage

    return getattr(chat, "usage", None) or Usage()


def stack_spec(model: str | None, endpoint: str | None) -> str | None:
    """The chat spec of `--model` / `--endpoint`: a full spec as it is, a model name at the endpoint, or None
    (the embedded model)."""
    if model and not endpoint and (":" in model or model == "embedded"):
        return model
    return f"endpoint:{model or 'default'}@{endpoint or ''}" if (model or endpoint) else None


def run_bench_command(params: dict, folder: Path, out: Path, specs: list, prices: tuple[float, float],
                      opts: dict) -> None:
    """`bench run` once its options are checked and its run folder is held."""
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.report.bench_page import rebuild_bench
    from mmaudit.store import RunStore

    stack, judge, judge_model, endpoint = opts["stack"], opts["judge"], opts["judge_model"], opts["endpoint"]
    concurrency, max_tokens, limit, budget = opts["concurrency"], budgets_option(opts), opts["limit"], opts["budget"]
    out.mkdir(parents=True, exist_ok=True)
    run = Invocation(RunStore(out / "runs.jsonl"), "bench run", params | {"folder": str(folder.resolve())})
    cost = {"price_per_1k": prices, "budget": budget}
    fixed_judge = None
    if stack and judge:
        fixed_judge = stack_models(out, judge, None, concurrency, cost, max_tokens)[0]
    blocks = {}
    for name, spec in specs:
        chat, judge_chat, default_name, budgets, compact, notes = stack_models(
            out, spec, judge or (f"{judge_model}@{endpoint or ''}" if judge_model else None), concurrency, cost,
            max_tokens, fixed_judge)
        if compact and limit is None:
            notes = notes + [f"The embedded model runs the first {EMBEDDED_LIMIT} questions by default (--limit N "
                             "for more): 16 regimes each, on 2 CPU cores in minutes."]
        found = probe_endpoint(chat, opts["vision"])
        judged = probe_endpoint(judge_chat) if judge_chat is not chat else found
        if found and found.get("canary") and not found["canary"]["read"]:
            notes = [f"Full-MM: {found['canary_line']}: its Full-MM branch does not measure a model that sees the "
                     "images."] + notes
        cfg = BenchConfig(stack=name or default_name, vision=opts["vision"], image_size=opts["image_size"],
                          limit=limit if limit is not None or not compact else EMBEDDED_LIMIT,
                          image_detail=opts["image_detail"], parametric=opts["parametric"], budgets=budgets,
                          **compact)
        blocks[cfg.stack] = run_stack(folder, out, chat, judge_chat, cfg, notes, budget, prices) | {
            "endpoint": found, "judge_endpoint": judged if judge_chat is not chat else None}
    only = next(iter(blocks.values())) if len(blocks) == 1 else {"stacks": blocks}
    (out / "summary.json").write_text(dumps(only, indent=2))
    run.finish()
    built, paths = rebuild_bench(out, opts["n_boot"], opts["seed"])  # the tables come from the judged files
    for name, summary in blocks.items():
        tabs = built["tables"][name]
        summary["tables"] = [{"title": t, "head": h, "rows": r} for t, h, r in tabs]
        failed = sum(summary["failed_rows"].values())
        console.rule(f"stack {name}")
        for title, head, rows in tabs:
            print_table(title, head, rows, left=("method", "component"))
        for n in summary["notes"]:
            console.print(f"[yellow]{n}[/yellow]")
        if failed:
            console.print(f"[yellow]{failed} method-rows failed (see summary.json 'failures'); the run completed"
                          "[/yellow]")
    (out / "summary.json").write_text(dumps(only, indent=2))
    console.print(f"judged files under {out / 'evaluation'}; report " + "  ".join(str(p) for p in paths))
