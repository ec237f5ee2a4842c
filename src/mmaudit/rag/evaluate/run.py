"""`mmaudit bench run`: branches, defences and the blinded judge over a QIMG-7 folder, into the release layout.

Per row: the three candidate answers (Parametric, Text-only, Full-MM), the
self-check and triage gates, the resolver; TextTrust once per unique
(question, text evidence) and reused across the image regimes; every router's
decision is stored with its raw output. The judge grades each method's answer
against the question's trusted clean evidence (its TC_IC passages), once per
unique (question, answer). Judged rows are written as
``evaluation/judged/<stack>/<dataset>/<method>_<n>.judged.jsonl`` so
``mmaudit bench score`` and the tables read them like a released run. Every
model call goes through the chat model's request cache, so a killed run resumes.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from mmaudit.data.images import inside, load_rgb
from mmaudit.errors import InputError
from mmaudit.models.chat import FailedReply
from mmaudit.rag.build.records import RegimeRow, read_rows
from mmaudit.rag.evaluate import prompts, routers, schemas
from mmaudit.rag.evaluate.judge_labels import parse_verdict
from mmaudit.rag.evaluate.release_out import write_release

METHODS = ("parametric", "text_only", "full_mm", "answer_consensus", "selfcheck_gate", "triage_gate",
           "cascaded_router", "text_trust", "field_selector", "soft_conductor")
BRANCH_METHODS = METHODS[:3]
PARAMETRIC_MODES = ("per-row", "per-question")
COMPONENTS = ("answer", "gate", "resolver", "judge")
# New-token budgets per component. An endpoint's must let a valid answer through (a minimal E.3 resolver JSON is
# ~104 tokens, a long-form answer several hundred); the embedded 135M model on 2 cores gets short ones.
ENDPOINT_BUDGET = {"answer": 512, "gate": 256, "resolver": 768, "judge": 256}
# Under guided decoding a label costs no budget: the embedded budgets bound the free text (reasons, final_answer).
EMBEDDED_BUDGET = {"answer": 40, "gate": 0, "resolver": 6, "judge": 0}



@dataclass
class BenchConfig:
    """How a stack is run: what the Full-MM model is sent, token budgets, Parametric generation, evidence size."""

    stack: str = "default"
    limit: int | None = None
    vision: bool = False  # Full-MM gets the image's pixels (a base64 data URL); else its OCR text
    image_size: int = 768  # longest side of the image sent, in pixels (never upscaled)
    image_detail: str = "auto"  # OpenAI's image detail ("auto", "low", "high"); "" leaves it out
    parametric: str = "per-row"  # the paper: "generated independently per benchmark row"
    budgets: dict = field(default_factory=lambda: dict(ENDPOINT_BUDGET))
    passages: int | None = None  # evidence cut for a small model (None: the row's five passages, whole)
    pipeline: bool = True  # rows flow through the components as their inputs exist (an async endpoint client)
    rows_in_flight: int = 128  # pipelined: rows under way at once (bounds the images held as data URLs)
    words: int | None = None

    def __post_init__(self) -> None:
        if self.parametric not in PARAMETRIC_MODES:
            raise ValueError(f"parametric must be one of {PARAMETRIC_MODES}, got {self.parametric!r}")
        if self.rows_in_flight < 1:
            raise ValueError(f"rows_in_flight must be at least 1, got {self.rows_in_flight}")
        unknown = set(self.budgets) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown budget components {sorted(unknown)}; choose from {COMPONENTS}")


def many(chat, requests: list[list[dict]], budget: int | None = None, salts: list[str] | None = None,
         schema: dict | None = None) -> list[str]:
    """Batched/concurrent when the model can (cached either way), one by one otherwise; a ``schema`` goes to a
    model that decodes under one (an endpoint's response_format, the embedded model's guided decoding)."""
    if not hasattr(chat, "chat_many"):
        return [chat.chat(m) for m in requests]
    kw: dict = {"salts": salts} if salts is not None else {}
    if getattr(chat, "takes_budget", False) and budget is not None:
        kw["max_new_tokens"] = budget
    if schema is not None and getattr(chat, "takes_schema", False):
        kw["schema"] = schema
    return chat.chat_many(requests, **kw)


def user(content) -> list[dict]:
    return [{"role": "user", "content": content}]


@lru_cache(maxsize=32)
def row_image(folder: Path, path: str | None) -> tuple[np.ndarray | None, str]:
    """A row's image pixels, or None and the reason (outside the folder, a bomb, unreadable: never a crash)."""
    if not path:
        return None, "no image path"
    try:
        return load_rgb(inside(folder, path, path, "image_evidence.local_path"), path,
                        "image_evidence.local_path")[0], ""
    except InputError as e:
        return None, e.reason


def image_bridge(folder: Path) -> Callable[[str | None], str]:
    """Image -> text for a model without vision: OCR lines of the image (rapidocr), or '' without it."""
    from mmaudit.pathways.text.ocr import ocr_available, read_lines

    @cache
    def bridge(path: str | None) -> str:
        pixels = row_image(folder, path)[0] if ocr_available() else None
        return " | ".join(ln.text for ln in read_lines(pixels)) if pixels is not None else ""

    return bridge


def image_data_url(folder: Path, size: int) -> Callable[[str | None], str | None]:
    """Image -> a PNG data URL, its longest side at most ``size`` pixels; None where it cannot be loaded."""
    import base64
    import io

    from PIL import Image

    @lru_cache(maxsize=64)  # a question's rows share images; a run's thousands of images are not all kept
    def url(path: str | None) -> str | None:
        pixels = row_image(folder, path)[0]
        if pixels is None:
            return None
        im = Image.fromarray(pixels)
        im.thumbnail((size, size), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    return url


def load_rows(folder: Path, limit: int | None = None) -> list[RegimeRow]:
    rows = [r for f in sorted(folder.glob("*_qimg7_mm_regimes_*.jsonl")) for r in read_rows(f)
            if isinstance(r, RegimeRow)]
    if not rows:
        raise InputError(str(folder), "rows", "no QIMG-7 rows (<dataset>_qimg7_mm_regimes_<n>.jsonl) to evaluate")
    if limit is not None:
        keep = sorted({(r.dataset, str(r.qid)) for r in rows})[:limit]
        rows = [r for r in rows if (r.dataset, str(r.qid)) in set(keep)]
    return rows


def compact(view: dict, passages: int | None, words: int | None) -> dict:
    """Fewer and shorter passages (for a small CPU model; the full evidence otherwise)."""
    if passages is None and words is None:
        return view
    ev = [dict(p, snippet=" ".join(p["snippet"].split()[:words]) if words else p["snippet"])
          for p in view["text_evidence"][:passages]]
    return view | {"text_evidence": ev}


def failure(*replies: str) -> str | None:
    """The reason of the first failed request among ``replies`` (None when all came back)."""
    return next((r.reason for r in replies if isinstance(r, FailedReply)), None)


@dataclass
class Branches:
    """The three candidate answers per row."""

    parametric: list[str]
    text_only: list[str]
    full_mm: list[str]

    def candidates(self) -> list[routers.Candidates]:
        return [routers.Candidates(*x) for x in zip(self.parametric, self.text_only, self.full_mm)]


@dataclass(frozen=True)
class RowRequests:
    """Every request one row's components send (its prompts and Full-MM's image)."""

    parametric: list[dict]
    parametric_salt: str  # "" when Parametric is asked once per question
    text_only: list[dict]
    full_mm: list[dict]
    self_check: list[dict]
    triage: list[dict]
    text_trust_key: str  # TextTrust is asked once per (question, text evidence)
    text_trust: list[dict]


@dataclass
class Requests:
    """The rows' requests by component (the staged order sends each column as a batch)."""

    parametric: list[list[dict]]
    parametric_salts: list[str] | None
    text_only: list[list[dict]]
    full_mm: list[list[dict]]
    self_check: list[list[dict]]
    triage: list[list[dict]]
    text_trust_key: list[str]
    text_trust: dict[str, list[dict]]

    @staticmethod
    def resolver(view: dict, c: routers.Candidates, compose: bool,
                 disabled: frozenset[str] = frozenset()) -> list[dict]:
        return user(prompts.resolver_prompt(view, c.parametric, c.text_only, c.full_mm, compose, disabled))


def text_trust_key(view: dict) -> str:
    return json.dumps([view["question"], view["text_evidence"]])


def parametric_salt(row: RegimeRow, cfg: BenchConfig) -> str:
    """Per row, a salt makes each row's Parametric request a call of its own; per question, none."""
    return f"{row.dataset}:{row.row_id}" if cfg.parametric == "per-row" else ""


def request_builder(folder: Path, rows: Sequence[RegimeRow], views: list[dict],
                    cfg: BenchConfig) -> Callable[[int], RowRequests]:
    """Row i's requests, built when asked (the pipelined run builds a row as it starts, off the event loop)."""
    bridge, data_url = image_bridge(folder), image_data_url(folder, cfg.image_size)

    def full_mm(v: dict):
        """Full-MM's content: the prompt and, with vision, the image's pixels (Table 12: 'if loadable')."""
        text, path = prompts.branch_prompt(v, "FULL_MM")
        if not cfg.vision:  # a text-only model gets the image as its OCR text (said in the report)
            return text + f"\nimage text (OCR): {bridge(path) or '(none)'}"
        url = data_url(path)
        if url is None:
            return text
        image = {"url": url} | ({"detail": cfg.image_detail} if cfg.image_detail else {})
        return [{"type": "text", "text": text}, {"type": "image_url", "image_url": image}]

    def build(i: int) -> RowRequests:
        v, r = views[i], rows[i]
        return RowRequests(
            parametric=user(prompts.branch_prompt(v, "PARAMETRIC")[0]),
            parametric_salt=parametric_salt(r, cfg),
            text_only=user(prompts.branch_prompt(v, "TEXT_ONLY")[0]), full_mm=user(full_mm(v)),
            self_check=user(prompts.self_check_prompt(v)), triage=user(prompts.triage_prompt(v)),
            text_trust_key=text_trust_key(v), text_trust=user(prompts.text_trust_prompt(v)))

    return build


def build_requests(folder: Path, rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig) -> Requests:
    build = request_builder(folder, rows, views, cfg)
    each = [build(i) for i in range(len(rows))]
    return Requests(
        parametric=[x.parametric for x in each],
        parametric_salts=[x.parametric_salt for x in each] if cfg.parametric == "per-row" else None,
        text_only=[x.text_only for x in each], full_mm=[x.full_mm for x in each],
        self_check=[x.self_check for x in each], triage=[x.triage for x in each],
        text_trust_key=[x.text_trust_key for x in each],
        text_trust={x.text_trust_key: x.text_trust for x in each})


def answer_branches(folder: Path, chat, rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig,
                    req: Requests | None = None) -> Branches:
    """Parametric (per row or per question), Text-only and Full-MM (pixels with vision, else OCR text)."""
    req = req or build_requests(folder, rows, views, cfg)
    budget = cfg.budgets.get("answer")
    par = many(chat, req.parametric, budget, req.parametric_salts)
    txt = many(chat, req.text_only, budget)
    mm = many(chat, req.full_mm, budget)
    return Branches(par, txt, mm)


def parametric_count(rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig) -> int:
    if cfg.parametric == "per-row":
        return len({parametric_salt(r, cfg) for r in rows})
    return len({json.dumps(v["question"]) for v in views})


def route_row(c: routers.Candidates, check: str, tri: str, tt: str, sel: routers.Resolution,
              com: routers.Resolution) -> dict[str, tuple[routers.Routed, tuple]]:
    """Every method's decision for one row, with the replies it used (a failed one fails that method-row)."""
    branches = (c.parametric, c.text_only, c.full_mm)
    return {"parametric": (routers.Routed(c.parametric, "FALLBACK"), (c.parametric,)),
            "text_only": (routers.Routed(c.text_only, "TEXT_ONLY"), (c.text_only,)),
            "full_mm": (routers.Routed(c.full_mm, "FULL_MM"), (c.full_mm,)),
            "answer_consensus": (routers.answer_consensus(c), branches),
            "selfcheck_gate": (routers.self_check_gate(c, check), (check, *branches)),
            "triage_gate": (routers.triage_gate(c, tri), (tri, *branches)),
            "cascaded_router": (routers.cascaded_router(c, check, tri), (check, tri, *branches)),
            "text_trust": (routers.text_trust(c, tt), (tt, *branches)),
            "field_selector": (routers.gated_router("field", c, sel, check), (sel.raw, check, *branches)),
            "soft_conductor": (routers.gated_router("soft", c, com, check), (com.raw, check, *branches))}


def judge_request(pair: tuple, clean: dict) -> list[dict]:
    ds, qid, q, a = pair
    return user(prompts.judge_prompt(q, a, *clean.get((ds, qid), ([], None))))


def apply_verdicts(rows: Sequence[RegimeRow], decisions: dict, errors: dict, verdict_raw: dict) -> dict:
    """Parsed verdicts per pair; a failed verdict fails the rows it grades (``errors`` is updated)."""
    verdicts = {p: parse_verdict(raw) + (raw,) for p, raw in verdict_raw.items()}
    judge_failed = {p: raw.reason for p, raw in verdict_raw.items() if isinstance(raw, FailedReply)}
    for m in decisions:
        errors[m] = [e or judge_failed.get((r.dataset, str(r.qid), r.question, d.answer))
                     for r, d, e in zip(rows, decisions[m], errors[m])]
    return verdicts


def judge_methods(judge, rows: Sequence[RegimeRow], decisions: dict, errors: dict, cfg: BenchConfig) -> dict:
    """The judge's reply per unique (dataset, qid, question, answer) of the methods' unfailed rows, graded
    against the question's clean evidence (:func:`apply_verdicts` reads them)."""
    clean = {(r.dataset, str(r.qid)): clean_evidence(r, cfg) for r in rows if r.regime == "TC_IC"}
    pairs = sorted({(r.dataset, str(r.qid), r.question, d.answer) for m in decisions
                    for r, d, e in zip(rows, decisions[m], errors[m]) if e is None})
    raw = many(judge, [judge_request(p, clean) for p in pairs], cfg.budgets.get("judge"), schema=schemas.JUDGE)
    return dict(zip(pairs, raw))


def prepare(folder: Path, cfg: BenchConfig) -> tuple[list[RegimeRow], list[dict]]:
    rows = load_rows(folder, cfg.limit)
    return rows, [compact(r.model_view(), cfg.passages, cfg.words) for r in rows]


@dataclass
class Replies:
    """What a run got back: per row its candidates, gate replies, TextTrust reply and both resolutions; its
    decisions and the replies each used; the judge's replies per (dataset, qid, question, answer)."""

    cands: list[routers.Candidates]
    checks: list[str]
    triages: list[str]
    text_trust: list[str]
    select: list[routers.Resolution]
    compose: list[routers.Resolution]
    routed: list[dict]
    verdict_raw: dict


def staged(chat, judge, rows, views, req: Requests, cfg: BenchConfig, tick) -> Replies:
    """Stage after stage, each a batch (the embedded model's batching; any chat model)."""
    budget = cfg.budgets
    br = answer_branches(None, chat, rows, views, cfg, req)
    tick("branches")
    checks = many(chat, req.self_check, budget.get("gate"), schema=schemas.SELF_CHECK)
    triages = many(chat, req.triage, budget.get("gate"), schema=schemas.TRIAGE)
    tick("gates")
    tt = dict(zip(req.text_trust, many(chat, list(req.text_trust.values()), budget.get("gate"),
                                       schema=schemas.TEXT_TRUST)))
    tick("text trust")
    cands = br.candidates()
    resolved = {}  # the select-only resolver feeds Field-Selector, the composing one Soft-Conductor (as released)
    for compose in (False, True):
        raw = many(chat, [req.resolver(v, c, compose) for v, c in zip(views, cands)], budget.get("resolver"),
                   schema=schemas.resolver(compose))
        resolved[compose] = [routers.resolve(c, r, compose) for c, r in zip(cands, raw)]
    tick("resolver")
    tts = [tt[k] for k in req.text_trust_key]
    routed = [route_row(*x) for x in zip(cands, checks, triages, tts, resolved[False], resolved[True])]
    tick("routing")
    verdict_raw = judge_methods(judge, rows, *collect(routed), cfg)
    tick("judge")
    return Replies(cands, checks, triages, tts, resolved[False], resolved[True], routed, verdict_raw)


def pipelined(chat, judge, rows, views, build: Callable[[int], RowRequests], cfg: BenchConfig,
              progress: Callable[[str, int, int], None]) -> Replies:
    """Every row flows through branches and gates (at once), then both resolvers, its routers and the judge
    as soon as its inputs exist, all under each endpoint's one concurrency limit; identical requests are
    sent once (joined in flight or read from the cache). Same requests, so the same replies as ``staged``.
    A row's requests are built as it starts, in a worker thread (image encoding overlaps the requests in
    flight), and at most ``cfg.rows_in_flight`` rows are under way (each holds its image as a data URL)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    budget = cfg.budgets
    clean = {(r.dataset, str(r.qid)): clean_evidence(r, cfg) for r in rows if r.regime == "TC_IC"}

    async def main() -> Replies:
        await chat.open_session()
        if judge is not chat:
            await judge.open_session()
        text_trust: dict[str, asyncio.Future] = {}
        verdicts: dict[tuple, asyncio.Future] = {}
        window = asyncio.Semaphore(cfg.rows_in_flight)
        builder = ThreadPoolExecutor(1, thread_name_prefix="bench-requests")  # one: OCR and caches stay serial
        done = 0

        def ask(messages, component, salt="", schema=None):
            return chat.achat(messages, budget.get(component), salt, schema)

        async def row(i: int):
            nonlocal done
            async with window:
                x = await asyncio.get_running_loop().run_in_executor(builder, build, i)
                if x.text_trust_key not in text_trust:
                    text_trust[x.text_trust_key] = asyncio.ensure_future(
                        ask(x.text_trust, "gate", schema=schemas.TEXT_TRUST))
                p, t, m, check, tri, tt = await asyncio.gather(
                    ask(x.parametric, "answer", x.parametric_salt), ask(x.text_only, "answer"),
                    ask(x.full_mm, "answer"), ask(x.self_check, "gate", schema=schemas.SELF_CHECK),
                    ask(x.triage, "gate", schema=schemas.TRIAGE), text_trust[x.text_trust_key])
                c = routers.Candidates(p, t, m)
                sel_raw, com_raw = await asyncio.gather(
                    *(ask(Requests.resolver(views[i], c, compose), "resolver", schema=schemas.resolver(compose))
                      for compose in (False, True)))
                sel, com = routers.resolve(c, sel_raw, False), routers.resolve(c, com_raw, True)
                routed = route_row(c, check, tri, tt, sel, com)
                r = rows[i]
                mine = {(r.dataset, str(r.qid), r.question, d.answer) for d, used in routed.values()
                        if failure(*used) is None}
                for pair in mine:
                    if pair not in verdicts:
                        verdicts[pair] = asyncio.ensure_future(
                            judge.achat(judge_request(pair, clean), budget.get("judge"), "", schemas.JUDGE))
                await asyncio.gather(*(verdicts[p] for p in mine))
            done += 1
            progress("bench run: rows", done, len(rows))
            return c, check, tri, tt, sel, com, routed

        try:
            out = await asyncio.gather(*(row(i) for i in range(len(rows))))
        finally:
            builder.shutdown(wait=True)
            await chat.close_session()
            if judge is not chat:
                await judge.close_session()
        cols = list(zip(*out)) if out else [[]] * 7
        return Replies(*(list(x) for x in cols), verdict_raw={p: f.result() for p, f in verdicts.items()})

    return asyncio.run(main())


def collect(routed: list[dict]) -> tuple[dict, dict]:
    """Per method: the rows' decisions and their failures (the first failed reply each used)."""
    decisions: dict[str, list[routers.Routed]] = defaultdict(list)
    errors: dict[str, list[str | None]] = defaultdict(list)
    for by in routed:
        for name, (r, used) in by.items():
            decisions[name].append(r)
            errors[name].append(failure(*used))
    return decisions, errors


def run_bench(folder: Path, chat, out: Path, judge=None, cfg: BenchConfig | None = None,
              progress: Callable[[str, int, int], None] | None = None) -> dict:
    cfg = cfg or BenchConfig()
    judge = judge or chat
    rows, views = prepare(folder, cfg)
    step = 0
    report = progress or (lambda *a: None)

    def tick(label: str) -> None:
        nonlocal step
        step += 1
        report("bench run", step, 7)

    piped = cfg.pipeline and all(hasattr(m, "achat") for m in (chat, judge))
    if piped:
        got = pipelined(chat, judge, rows, views, request_builder(folder, rows, views, cfg), cfg, report)
    else:
        got = staged(chat, judge, rows, views, build_requests(folder, rows, views, cfg), cfg, tick)
    decisions, errors = collect(got.routed)
    verdicts = apply_verdicts(rows, decisions, errors, got.verdict_raw)
    checks, triages, tt = got.checks, got.triages, dict(zip(map(text_trust_key, views), got.text_trust))
    resolved = {False: got.select, True: got.compose}
    model_name = getattr(chat, "name", "")
    written = write_judged(rows, decisions, verdicts, errors, out, cfg.stack)
    parts = {"checks": checks, "triages": triages, "select": got.select, "compose": got.compose}
    written += write_release(rows, decisions, errors, parts, out, cfg.stack, model_name)
    if not piped:
        tick("write")
    sent_images = sum(row_image(folder, r.image_evidence.local_path or None)[0] is not None
                      for r in rows) if cfg.vision else 0
    return {"rows": len(rows), "questions": len({(r.dataset, str(r.qid)) for r in rows}), "files": written,
            "evidence": {"passages": cfg.passages, "words": cfg.words},
            "full_mm_input": ("pixels" if cfg.vision else "OCR text (text-only model)"),
            "images_sent": sent_images, "images_unloadable": len(rows) - sent_images if cfg.vision else 0,
            "image_size": cfg.image_size if cfg.vision else None, "parametric": cfg.parametric,
            "image_errors": {r.image_evidence.local_path: why for r in rows
                             if (why := row_image(folder, r.image_evidence.local_path or None)[1])
                             and r.image_evidence.local_path},
            "parametric_requests": parametric_count(rows, views, cfg), "pipelined": piped,
            "budgets": cfg.budgets,
            "judge_calls": len(verdicts), "unparsed_verdicts": sum(not v[2] for v in verdicts.values()),
            "unparsed": unparsed_counts(checks, triages, list(tt.values()), resolved, verdicts),
            "unparsed_decisions": {m: sum(not d.parsed for d in decisions[m]) for m in METHODS},
            "distinct_decisions": {m: dict(Counter(d.route for d in decisions[m])) for m in METHODS[3:]},
            "structured_output": structured_mode(chat),
            "failed_rows": {m: sum(e is not None for e in errors[m]) for m in METHODS},
            "failures": sorted({e for m in METHODS for e in errors[m] if e})[:20]}


def unparsed_counts(checks, triages, text_trust, resolved, verdicts) -> dict:
    """Replies that were not the asked-for JSON, per component (each falls back as documented and is counted;
    a failed request is counted under failed_rows instead)."""
    ok = {"self_check": [routers.self_check(r)[1] for r in checks if not isinstance(r, FailedReply)],
          "triage": [routers.triage(r)[1] for r in triages if not isinstance(r, FailedReply)],
          "text_trust": [routers.text_trust_state(r)[1] for r in text_trust if not isinstance(r, FailedReply)],
          "resolver_select": [r.parsed for r in resolved[False] if r.raw],
          "resolver_compose": [r.parsed for r in resolved[True] if r.raw],
          "judge": [v[2] for v in verdicts.values() if v[3]]}
    return {k: {"unparsed": sum(not x for x in v), "of": len(v)} for k, v in ok.items()}


def structured_mode(chat) -> str:
    """How structured replies were asked for: the report says it."""
    if not getattr(chat, "takes_schema", False):
        return "plain prompting (this model takes no schema)"
    if getattr(chat, "schema_rejected", False):
        return "plain prompting: the endpoint answered 400 to response_format (remembered for this run)"
    return "guided decoding under the JSON schema" if hasattr(chat, "_guided") else "response_format json_schema"


def clean_evidence(row: RegimeRow, cfg: BenchConfig) -> tuple[list[dict], dict]:
    """The judge's trusted evidence (Table 12): the question's clean text and its clean image's metadata."""
    view = compact(row.model_view(), cfg.passages, cfg.words)
    im = view["image"]
    return view["text_evidence"], {"title": im["title"], "alt_text": im["alt_text"], "page_url": im["page_url"]}


def write_judged(rows: Sequence[RegimeRow], decisions: dict, verdicts: dict, errors: dict, out: Path,
                 stack: str) -> list[str]:
    """``evaluation/judged/<stack>/<dataset>/<method>_<n>.judged.jsonl``; a row whose requests failed keeps its
    ``error`` and no label (scoring leaves it out and counts it)."""
    files = []
    by_dataset: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_dataset[r.dataset.lower()].append(i)
    for ds, idx in by_dataset.items():
        n_q = len({str(rows[i].qid) for i in idx})
        for m in decisions:
            path = out / "evaluation" / "judged" / stack / ds / f"{m}_{n_q}.judged.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w") as f:
                for i in idx:
                    r, d, err = rows[i], decisions[m][i], errors[m][i]
                    label, score, parsed, raw = verdicts.get((r.dataset, str(r.qid), r.question, d.answer),
                                                             (None, None, False, ""))
                    if err is not None:
                        label, score, parsed, raw = None, None, False, ""
                    f.write(json.dumps({"row_id": r.row_id, "qid": r.qid, "dataset": r.dataset, "regime": r.regime,
                                        "question": r.question,
                                        "image_pollution_type": r.image_pollution_type, "baseline": m,
                                        "answer": d.answer, "route": d.route, "decision_raw": d.raw,
                                        "decision_parsed": d.parsed, "label": label, "score": score,
                                        "judge_parsed": parsed, "judge_raw": raw}
                                       | ({"error": err} if err is not None else {})) + "\n")
            files.append(str(path))
    return files
