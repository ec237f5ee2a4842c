"""SATR's ablations: the resolver field ablation (G.8) and the router component ablation (G.9).

Both re-use a run's branch answers and gate replies (the same requests, so a
finished ``bench run`` in the same folder answers them from its cache), judge
each variant's answers with the same blinded judge, and score them like the
main table. G.8 re-runs the select-only resolver with one structured field
removed from its prompt and its schema at a time and routes it under
Field-Selector's policy; G.9 scores the self-check gate alone, the triage gate
alone and the Cascaded Router built from the two.
"""

from __future__ import annotations

from pathlib import Path

from mmaudit.rag.evaluate import routers, schemas
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.decisions import apply_verdicts, failure, judge_methods
from mmaudit.rag.evaluate.requests import Requests, build_requests, many
from mmaudit.rag.evaluate.run import prepare, write_judged
from mmaudit.rag.evaluate.schemas import RESOLVER_FIELDS
from mmaudit.rag.evaluate.score import main_table
from mmaudit.rag.evaluate.staged import answer_branches

FULL = "field_selector"


def _score(folder: Path, rows, decisions: dict, errors: dict, judge, cfg: BenchConfig, out: Path) -> list[dict]:
    verdicts = apply_verdicts(rows, decisions, errors, judge_methods(judge, rows, decisions, errors, cfg))
    write_judged(rows, decisions, verdicts, errors, out, cfg.stack)
    table = {r["method"]: r for r in main_table(out, cfg.stack)}
    return [table[m] | {"failed": sum(e is not None for e in errors[m])} for m in decisions if m in table]


def ablate_fields(folder: Path, chat, out: Path, judge=None, cfg: BenchConfig | None = None,
                  fields: tuple[str, ...] = RESOLVER_FIELDS) -> list[dict]:
    """Field-Selector in full and without each of ``fields``: TC, TP, Drop, Balanced and the change in
    Balanced and TP against the full resolver (Table 19's columns)."""
    cfg = cfg or BenchConfig()
    unknown = set(fields) - set(RESOLVER_FIELDS)
    if unknown:
        raise ValueError(f"unknown resolver fields {sorted(unknown)}; choose from {RESOLVER_FIELDS}")
    rows, views = prepare(folder, cfg)
    br = answer_branches(folder, chat, rows, views, cfg)
    cands = br.candidates()
    decisions, errors = {}, {}
    for name, off in ((FULL, frozenset()), *((f"{FULL}-no_{f}", frozenset({f})) for f in fields)):
        asks = [Requests.resolver(v, c, False, off) for v, c in zip(views, cands)]
        raw = many(chat, asks, cfg.budgets.get("resolver"), schema=schemas.resolver(False, off))
        decisions[name] = [routers.gated_router("field", c, routers.resolve(c, r, False, off))
                           for c, r in zip(cands, raw)]
        errors[name] = [failure(r, c.parametric, c.text_only, c.full_mm) for c, r in zip(cands, raw)]
    table = _score(folder, rows, decisions, errors, judge or chat, cfg, out)
    full = next(r for r in table if r["method"] == FULL)
    for r in table:
        r["ablation"] = "full Field-Selector" if r["method"] == FULL else "w/o " + r["method"].split("-no_", 1)[1]
        r["d_balanced"], r["d_tp"] = r["balanced"] - full["balanced"], r["tp"] - full["tp"]
    return table


def ablate_components(folder: Path, chat, out: Path, judge=None, cfg: BenchConfig | None = None) -> list[dict]:
    """Self-check only, triage only, and the Cascaded Router that chains them (Table 20)."""
    cfg = cfg or BenchConfig()
    rows, views = prepare(folder, cfg)
    req = build_requests(folder, rows, views, cfg)
    cands = answer_branches(folder, chat, rows, views, cfg, req).candidates()
    checks = many(chat, req.self_check, cfg.budgets.get("gate"), schema=schemas.SELF_CHECK)
    triages = many(chat, req.triage, cfg.budgets.get("gate"), schema=schemas.TRIAGE)
    decisions = {"selfcheck_gate": [routers.self_check_gate(c, s) for c, s in zip(cands, checks)],
                 "triage_gate": [routers.triage_gate(c, t) for c, t in zip(cands, triages)],
                 "cascaded_router": [routers.cascaded_router(c, s, t) for c, s, t in zip(cands, checks, triages)]}
    used = {"selfcheck_gate": [(s,) for s in checks], "triage_gate": [(t,) for t in triages],
            "cascaded_router": list(zip(checks, triages))}
    errors = {m: [failure(*u, c.parametric, c.text_only, c.full_mm) for u, c in zip(used[m], cands)]
              for m in decisions}
    table = _score(folder, rows, decisions, errors, judge or chat, cfg, out)
    names = {"selfcheck_gate": "Self-check only", "triage_gate": "Triage only", "cascaded_router": "Cascaded Router"}
    for r in table:
        r["ablation"] = names[r["method"]]
    return sorted(table, key=lambda r: list(names).index(r["method"]))
