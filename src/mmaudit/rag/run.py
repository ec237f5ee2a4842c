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
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from mmaudit.rag import prompts, routers
from mmaudit.rag.judge_labels import parse_verdict
from mmaudit.rag.records import RegimeRow, read_rows

METHODS = ("parametric", "text_only", "full_mm", "answer_consensus", "self_check_gate", "triage_gate",
           "cascaded_router", "text_trust", "field_selector", "soft_conductor")


# New-token budgets per call type, for models that take one (the embedded one): JSON verdicts are short.
BUDGET = {"answer": 40, "gate": 24, "resolver": 48, "judge": 16}


def many(chat, requests: list[list[dict]], kind: str = "answer") -> list[str]:
    """Batched/concurrent when the model can (cached either way), one by one otherwise."""
    if getattr(chat, "takes_budget", False):
        return chat.chat_many(requests, max_new_tokens=BUDGET[kind])
    return chat.chat_many(requests) if hasattr(chat, "chat_many") else [chat.chat(m) for m in requests]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def image_bridge(folder: Path) -> Callable[[str | None], str]:
    """Image -> text for a model without vision: OCR lines of the image (rapidocr), or '' without it."""
    from mmaudit.pathways.text.ocr import ocr_available, read_lines

    @cache
    def bridge(path: str | None) -> str:
        if not path or not ocr_available() or not (folder / path).exists():
            return ""
        import numpy as np
        from PIL import Image

        with Image.open(folder / path) as im:
            return " | ".join(ln.text for ln in read_lines(np.asarray(im.convert("RGB"))))

    return bridge


def load_rows(folder: Path, limit: int | None = None) -> list[RegimeRow]:
    rows = [r for f in sorted(folder.glob("*_qimg7_mm_regimes_*.jsonl")) for r in read_rows(f)
            if isinstance(r, RegimeRow)]
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


def run_bench(folder: Path, chat, out: Path, judge=None, stack: str = "default", limit: int | None = None,
              vision: bool = False, progress: Callable[[str, int, int], None] | None = None,
              passages: int | None = None, words: int | None = None) -> dict:
    judge = judge or chat
    rows = load_rows(folder, limit)
    views = [compact(r.model_view(), passages, words) for r in rows]
    bridge = image_bridge(folder)
    step = 0

    def tick(label: str) -> None:
        nonlocal step
        step += 1
        if progress:
            progress("bench run", step, 7)

    def full_mm(v: dict) -> str:
        text, path = prompts.branch_prompt(v, "FULL_MM")
        if not vision:  # a text-only model gets the image as its OCR text (said in the report)
            text += f"\nimage text (OCR): {bridge(path) or '(none)'}"
        return text

    par = many(chat, [user(prompts.branch_prompt(v, "PARAMETRIC")[0]) for v in views])
    txt = many(chat, [user(prompts.branch_prompt(v, "TEXT_ONLY")[0]) for v in views])
    mm = many(chat, [user(full_mm(v)) for v in views])
    tick("branches")
    checks = many(chat, [user(prompts.self_check_prompt(v)) for v in views], "gate")
    triages = many(chat, [user(prompts.triage_prompt(v)) for v in views], "gate")
    tick("gates")
    unique_text = {}
    for v in views:
        unique_text.setdefault(json.dumps([v["question"], v["text_evidence"]]), v)
    tt = dict(zip(unique_text, many(chat, [user(prompts.text_trust_prompt(v)) for v in unique_text.values()],
                                    "gate")))
    tick("text trust")
    resolver = many(chat, [user(prompts.resolver_prompt(v, p, t, m)) for v, p, t, m in zip(views, par, txt, mm)],
                    "resolver")
    tick("resolver")
    decisions: dict[str, list[routers.Routed]] = defaultdict(list)
    for i, v in enumerate(views):
        c = routers.Candidates(par[i], txt[i], mm[i])
        key = json.dumps([v["question"], v["text_evidence"]])
        for name, r in (("parametric", routers.Routed(par[i], "FALLBACK")),
                        ("text_only", routers.Routed(txt[i], "TEXT_ONLY")),
                        ("full_mm", routers.Routed(mm[i], "FULL_MM")),
                        ("answer_consensus", routers.answer_consensus(c)),
                        ("self_check_gate", routers.self_check_gate(c, checks[i])),
                        ("triage_gate", routers.triage_gate(c, triages[i])),
                        ("cascaded_router", routers.cascaded_router(c, checks[i], triages[i])),
                        ("text_trust", routers.text_trust(c, tt[key])),
                        ("field_selector", routers.field_selector(c, resolver[i])),
                        ("soft_conductor", routers.soft_conductor(c, resolver[i], checks[i]))):
            decisions[name].append(r)
    tick("routing")
    clean = {(r.dataset, str(r.qid)): compact(r.model_view(), passages, words)["text_evidence"]
             for r in rows if r.regime == "TC_IC"}
    pairs = sorted({(r.dataset, str(r.qid), r.question, d.answer) for m in METHODS
                    for r, d in zip(rows, decisions[m])})
    verdict_raw = many(judge, [user(prompts.judge_prompt(q, a, clean.get((ds, qid), []))) for ds, qid, q, a in pairs],
                       "judge")
    verdicts = {p: parse_verdict(raw) + (raw,) for p, raw in zip(pairs, verdict_raw)}
    tick("judge")
    written = write_judged(rows, decisions, verdicts, out, stack)
    tick("write")
    return {"rows": len(rows), "questions": len({(r.dataset, str(r.qid)) for r in rows}), "files": written,
            "evidence": {"passages": passages, "words": words},
            "judge_calls": len(pairs), "unparsed_verdicts": sum(not v[2] for v in verdicts.values()),
            "unparsed_decisions": {m: sum(not d.parsed for d in decisions[m]) for m in METHODS}}


def write_judged(rows: Sequence[RegimeRow], decisions: dict, verdicts: dict, out: Path, stack: str) -> list[str]:
    files = []
    by_dataset: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_dataset[r.dataset.lower()].append(i)
    for ds, idx in by_dataset.items():
        n_q = len({str(rows[i].qid) for i in idx})
        for m in METHODS:
            path = out / "evaluation" / "judged" / stack / ds / f"{m}_{n_q}.judged.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w") as f:
                for i in idx:
                    r, d = rows[i], decisions[m][i]
                    label, score, parsed, raw = verdicts[(r.dataset, str(r.qid), r.question, d.answer)]
                    f.write(json.dumps({"row_id": r.row_id, "qid": r.qid, "dataset": r.dataset, "regime": r.regime,
                                        "question": r.question,
                                        "image_pollution_type": r.image_pollution_type, "baseline": m,
                                        "answer": d.answer, "route": d.route, "decision_raw": d.raw,
                                        "decision_parsed": d.parsed, "label": label, "score": score,
                                        "judge_parsed": parsed, "judge_raw": raw}) + "\n")
            files.append(str(path))
    return files
