"""A run's answers and decisions in the release's own layout, beside its judged files.

``evaluation/predictions/<stack>/<dataset>/<method>_<n>.jsonl`` holds every method's answer per row, and
``evaluation/choices/<stack>/<dataset>/<method>_<n>.choices.jsonl`` every routed method's decision with the
fields the release records for it (the two resolvers are files of their own, ``source_aware_selector`` and
``source_aware_conductor``, as released), so a run can be scored, replayed (``bench replay``) and compared
with the release row by row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from mmaudit.jsonout import dumps
from mmaudit.normalise import lowered
from mmaudit.rag.construct.records import RegimeRow
from mmaudit.rag.evaluate import routers

POLICY = {"field_selector": "field", "soft_conductor": "soft"}  # the release's post-processing policy names
RESOLVER_OF = {"field_selector": "source_aware_selector", "soft_conductor": "source_aware_conductor"}


def resolver_record(res: routers.Resolution) -> dict:
    """What the release keeps of one resolver call."""
    d = routers.parse_json(res.raw) or {}
    return {"decision": res.decision, "chosen_source": res.chosen_source, "text_reliability": res.text_reliability,
            "image_reliability": res.image_reliability,
            "internal_external_conflict": d.get("internal_external_conflict", ""),
            "cross_modal_conflict": d.get("cross_modal_conflict", ""),
            "candidate_scores": d.get("candidate_scores", {}), "reason": d.get("reason", ""),
            "raw_output": res.raw, "parsed": res.parsed}


def gated_record(policy: str, selfcheck: str, resolver: dict) -> dict:
    """A gated router's row: its inputs (the self-check decision, the resolver's decision and reliabilities)
    and what the policy makes of them."""
    decision, source = routers.gated(policy, selfcheck, resolver.get("decision", ""),
                                     resolver.get("chosen_source", ""), resolver.get("text_reliability", ""))
    return {"policy": policy, "selfcheck_decision": selfcheck, "resolver_decision": resolver.get("decision", ""),
            "chosen_source": source, "final_decision": decision,
            "text_reliability": lowered(resolver.get("text_reliability")),
            "image_reliability": lowered(resolver.get("image_reliability"))}


def choice_records(i: int, decisions: dict, parts: dict) -> dict[str, dict]:
    """Row i's record per choices file, keyed by the release's method (file) name."""
    sc, tri = routers.self_check(parts["checks"][i])[0], routers.triage(parts["triages"][i])[0]
    sel, com = resolver_record(parts["select"][i]), resolver_record(parts["compose"][i])
    recs = {"selfcheck_gate": {"decision": sc, "chosen_source": routers.route_source(sc),
                               "reasoning_raw": parts["checks"][i]},
            "triage_gate": {"decision": tri, "chosen_source": routers.route_source(tri),
                            "reasoning_raw": parts["triages"][i]},
            "cascaded_router": {"stage1_selfcheck": sc, "stage2_triage": tri,
                                "decision": decisions["cascaded_router"][i].route,
                                "chosen_source": decisions["cascaded_router"][i].source},
            "source_aware_selector": sel, "source_aware_conductor": com,
            "field_selector": gated_record("field", sc, sel), "soft_conductor": gated_record("soft", sc, com)}
    for m in ("answer_consensus", "text_trust"):
        d = decisions[m][i]
        recs[m] = {"decision": d.route, "chosen_source": d.source, "reasoning_raw": d.raw}
    return recs


def _write(path: Path, recs: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(dumps(r, ensure_ascii=False) + "\n" for r in recs))
    return str(path)


def write_release(rows: Sequence[RegimeRow], decisions: dict, errors: dict, parts: dict, out: Path, stack: str,
                  model: str) -> list[str]:
    by_dataset: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_dataset[r.dataset.lower()].append(i)
    files = []
    err_of = errors | {RESOLVER_OF[m]: errors[m] for m in RESOLVER_OF}  # a resolver fails with its router
    for ds, idx in by_dataset.items():
        n_q = len({str(rows[i].qid) for i in idx})
        answers = {m: {i: decisions[m][i].answer for i in idx} for m in decisions}
        answers |= {RESOLVER_OF[m]: {i: parts["select" if m == "field_selector" else "compose"][i].answer
                                     for i in idx} for m in RESOLVER_OF}
        for m, by_row in answers.items():
            err = err_of[m]
            files.append(_write(out / "evaluation" / "predictions" / stack / ds / f"{m}_{n_q}.jsonl",
                                [{"row_id": rows[i].row_id, "qid": rows[i].qid, "question": rows[i].question,
                                  "regime": rows[i].regime, "baseline": m, "prediction_model": model,
                                  "prediction": by_row[i], "error": err[i] or ""} for i in idx]))
        per_file: dict[str, list[dict]] = defaultdict(list)
        for i in idx:
            r = rows[i]
            for m, rec in choice_records(i, decisions, parts).items():
                per_file[m].append({"row_id": r.row_id, "qid": r.qid, "regime": r.regime} | rec
                                   | {"error": err_of[m][i] or ""})
        files += [_write(out / "evaluation" / "choices" / stack / ds / f"{m}_{n_q}.choices.jsonl", recs)
                  for m, recs in per_file.items()]
    return files
