"""The staged bench run: component after component, each a batch (the embedded model batches; any chat model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mmaudit.rag.construct.records import RegimeRow
from mmaudit.rag.evaluate import routers, schemas
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.decisions import Replies, collect, judge_methods, route_row
from mmaudit.rag.evaluate.requests import Requests, build_requests, many


@dataclass
class Branches:
    """The three candidate answers per row."""

    parametric: list[str]
    text_only: list[str]
    full_mm: list[str]

    def candidates(self) -> list[routers.Candidates]:
        return [routers.Candidates(*x) for x in zip(self.parametric, self.text_only, self.full_mm)]


def answer_branches(folder: Path, chat, rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig,
                    req: Requests | None = None) -> Branches:
    """Parametric (per row or per question), Text-only and Full-MM (pixels with vision, else OCR text)."""
    req = req or build_requests(folder, rows, views, cfg)
    budget = cfg.budgets.get("answer")
    par = many(chat, req.parametric, budget, req.parametric_salts)
    txt = many(chat, req.text_only, budget)
    mm = many(chat, req.full_mm, budget)
    return Branches(par, txt, mm)


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
