"""A run's answers and decisions in the release's own layout, beside its judged files.

``evaluation/predictions/<stack>/<dataset>/<baseline>_<n>.jsonl`` holds every method's answer per row and
``evaluation/choices/<stack>/<dataset>/<method>_<n>.choices.jsonl`` every routed method's decision with the
gate and resolver outputs it came from, so a run can be scored, replayed and compared like the release.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from mmaudit.rag.build.records import RegimeRow
from mmaudit.rag.evaluate import routers

POLICY = {"field_selector": "field", "soft_conductor": "soft"}  # the release's post-processing policy names


def _resolver_fields(raw: str) -> dict:
    d = routers.parse_json(raw) or {}
    return {"resolver_decision": routers.norm(d.get("decision")),
            "text_reliability": str(d.get("text_reliability", "") or "").strip().lower(),
            "image_reliability": str(d.get("image_reliability", "") or "").strip().lower()}


def write_release(rows: Sequence[RegimeRow], decisions: dict, errors: dict, checks: Sequence[str],
                  resolver: Sequence[str], out: Path, stack: str, model: str) -> list[str]:
    by_dataset: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_dataset[r.dataset.lower()].append(i)
    files = []
    for ds, idx in by_dataset.items():
        n_q = len({str(rows[i].qid) for i in idx})
        for m, routed in decisions.items():
            pred_path = out / "evaluation" / "predictions" / stack / ds / f"{m}_{n_q}.jsonl"
            pred_path.parent.mkdir(parents=True, exist_ok=True)
            with open(pred_path, "w") as f:
                for i in idx:
                    r, d = rows[i], routed[i]
                    f.write(json.dumps({"row_id": r.row_id, "qid": r.qid, "question": r.question,
                                        "regime": r.regime, "baseline": m, "prediction_model": model,
                                        "prediction": d.answer, "error": errors[m][i] or ""}) + "\n")
            files.append(str(pred_path))
            if m in ("parametric", "text_only", "full_mm"):
                continue
            choice_path = out / "evaluation" / "choices" / stack / ds / f"{m}_{n_q}.choices.jsonl"
            choice_path.parent.mkdir(parents=True, exist_ok=True)
            with open(choice_path, "w") as f:
                for i in idx:
                    r, d = rows[i], routed[i]
                    rec = {"row_id": r.row_id, "qid": r.qid, "regime": r.regime, "method": m}
                    if m in POLICY:
                        rec["policy"] = POLICY[m]
                    if m in ("self_check_gate", "cascaded_router", "soft_conductor"):
                        rec["selfcheck_decision"] = routers.self_check(checks[i])[0]
                    if m in ("field_selector", "soft_conductor"):
                        rec |= _resolver_fields(resolver[i])
                    rec |= {"final_decision": d.route, "chosen_source": routers.route_source(d.route),
                            "decision_raw": d.raw, "decision_parsed": d.parsed, "error": errors[m][i] or ""}
                    f.write(json.dumps(rec) + "\n")
            files.append(str(choice_path))
    return files
