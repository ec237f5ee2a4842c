"""From replies to decisions: every router's route for a row, the failures that fail a method-row, the judge's
verdicts per unique (dataset, qid, question, answer)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from mmaudit.models.chat import FailedReply
from mmaudit.rag.construct.records import RegimeRow
from mmaudit.rag.evaluate import routers, schemas
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.judge_labels import parse_verdict
from mmaudit.rag.evaluate.methods import RowReplies
from mmaudit.rag.evaluate.methods import routers as method_routers
from mmaudit.rag.evaluate.requests import clean_evidence, judge_request, many


def failure(*replies: str) -> str | None:
    """The reason of the first failed request among ``replies`` (None when all came back)."""
    return next((r.reason for r in replies if isinstance(r, FailedReply)), None)


def route_row(c: routers.Candidates, check: str, tri: str, tt: str, sel: routers.Resolution,
              com: routers.Resolution) -> dict[str, tuple[routers.Routed, tuple]]:
    """Every registered method's decision for one row (:mod:`mmaudit.rag.evaluate.methods`), with the replies it
    used (a failed one fails that method-row)."""
    replies = RowReplies(check, tri, tt, sel, com)
    return {name: m.decide(c, replies) for name, m in method_routers().items()}


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


def collect(routed: list[dict]) -> tuple[dict, dict]:
    """Per method: the rows' decisions and their failures (the first failed reply each used)."""
    decisions: dict[str, list[routers.Routed]] = defaultdict(list)
    errors: dict[str, list[str | None]] = defaultdict(list)
    for by in routed:
        for name, (r, used) in by.items():
            decisions[name].append(r)
            errors[name].append(failure(*used))
    return decisions, errors
