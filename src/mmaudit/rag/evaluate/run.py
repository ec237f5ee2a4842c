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

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from mmaudit.errors import FolderError
from mmaudit.jsonout import dumps
from mmaudit.models.chat import FailedReply
from mmaudit.rag.construct.records import RegimeRow, read_rows
from mmaudit.rag.evaluate import routers
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.decisions import apply_verdicts, collect
from mmaudit.rag.evaluate.methods import BRANCH_METHODS, methods
from mmaudit.rag.evaluate.pipelined import pipelined
from mmaudit.rag.evaluate.release_out import write_release
from mmaudit.rag.evaluate.requests import (
    build_requests,
    compact,
    parametric_count,
    request_builder,
    row_image,
    text_trust_key,
)
from mmaudit.rag.evaluate.staged import staged


def load_rows(folder: Path, limit: int | None = None) -> list[RegimeRow]:
    rows = [r for f in sorted(folder.glob("*_qimg7_mm_regimes_*.jsonl")) for r in read_rows(f)
            if isinstance(r, RegimeRow)]
    if not rows:
        raise FolderError(str(folder), "rows", "no QIMG-7 rows (<dataset>_qimg7_mm_regimes_<n>.jsonl) to evaluate")
    if limit is not None:
        keep = sorted({(r.dataset, str(r.qid)) for r in rows})[:limit]
        rows = [r for r in rows if (r.dataset, str(r.qid)) in set(keep)]
    return rows


def prepare(folder: Path, cfg: BenchConfig) -> tuple[list[RegimeRow], list[dict]]:
    rows = load_rows(folder, cfg.limit)
    return rows, [compact(r.model_view(), cfg.passages, cfg.words) for r in rows]


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
    names = methods()
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
            "unparsed_decisions": {m: sum(not d.parsed for d in decisions[m]) for m in names},
            "distinct_decisions": {m: dict(Counter(d.route for d in decisions[m])) for m in names
                                   if m not in BRANCH_METHODS},
            "structured_output": structured_mode(chat),
            "failed_rows": {m: sum(e is not None for e in errors[m]) for m in names},
            "failures": sorted({e for m in names for e in errors[m] if e})[:20]}


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
        return "plain prompting: the endpoint rejected response_format (remembered for this run)"
    if hasattr(chat, "_guided"):
        return "guided decoding under the JSON schema"
    return FORM_NAMES[getattr(chat, "structured", "json_schema")]


FORM_NAMES = {"json_schema": "response_format json_schema",
              "json_object+schema": "response_format json_object with the schema (llama.cpp's form)",
              "json_object": "response_format json_object (the schema in the prompt only)",
              "plain": "plain prompting: the endpoint takes no structured form (probed)"}


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
                    f.write(dumps({"row_id": r.row_id, "qid": r.qid, "dataset": r.dataset, "regime": r.regime,
                                        "question": r.question,
                                        "image_pollution_type": r.image_pollution_type, "baseline": m,
                                        "answer": d.answer, "route": d.route, "decision_raw": d.raw,
                                        "decision_parsed": d.parsed, "label": label, "score": score,
                                        "judge_parsed": parsed, "judge_raw": raw}
                                       | ({"error": err} if err is not None else {})) + "\n")
            files.append(str(path))
    return files
