"""`mmaudit bench replay`: re-route recorded gate and resolver outputs with mmaudit's router code, no LLM call.

Input is the release layout ``evaluation/choices/<stack>/<dataset>/<method>_<n>.choices*.jsonl`` (the
authors' files, or a ``bench run``'s). Per row the inputs are read from what the release records: the
self-check and triage decisions (re-read from their raw replies when those are kept), the two resolvers'
decisions, sources and reliabilities (re-read from ``raw_output`` when kept), and a gated router row's own
``selfcheck_decision`` / ``resolver_decision`` / ``text_reliability``. Every output decision and source is
computed here, never copied; where the input carried one, agreement is counted. A router whose inputs exist
but whose file does not (Field-Selector from a self-check and a selector file) gets a file of its own.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from mmaudit.errors import FolderError, InputError, json_reason
from mmaudit.jsonout import dumps
from mmaudit.rag.evaluate import routers
from mmaudit.rag.evaluate.release_out import POLICY, RESOLVER_OF, gated_record

NAME = re.compile(r"^(?P<method>.+?)_(?P<n>\d+)\.choices(?:\.[A-Za-z0-9]+)?\.jsonl$")
GATED = tuple(POLICY)
OUTPUT_FIELDS = {"selfcheck_gate": ("decision", "chosen_source"), "triage_gate": ("decision", "chosen_source"),
                 "cascaded_router": ("decision", "chosen_source"),
                 "source_aware_selector": ("decision", "chosen_source"),
                 "source_aware_conductor": ("decision", "chosen_source"),
                 "field_selector": ("final_decision", "chosen_source"),
                 "soft_conductor": ("final_decision", "chosen_source")}
_DUMMY = routers.Candidates("parametric", "text_only", "full_mm")  # the decision never depends on the answers


def choices_root(path: Path) -> Path:
    for cand in (path / "evaluation" / "choices", path / "choices", path):
        if cand.is_dir() and any(cand.glob("*/*/*.choices*.jsonl")):
            return cand
    raise FolderError(str(path), "choices", "no <stack>/<dataset>/<method>_<n>.choices.jsonl files under it")


def read_choices(path: Path) -> dict:
    rows = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path.name}:{n}", "line", json_reason(e)) from e
        if not isinstance(rec, dict) or "row_id" not in rec:
            raise InputError(f"{path.name}:{n}", "row_id", "missing")
        rows[rec["row_id"]] = rec
    return rows


def _gate(rec: dict, parse) -> str:
    raw = rec.get("reasoning_raw")
    return parse(raw)[0] if isinstance(raw, str) and raw else str(rec.get("decision", "")).upper()


def _resolver(rec: dict, compose: bool) -> dict:
    """A resolver row's decision and source recomputed from its raw reply when kept, else from its fields."""
    raw = rec.get("raw_output")
    if isinstance(raw, str) and raw and not raw.startswith("ERROR:"):
        res = routers.resolve(_DUMMY, raw, compose)
        return {"decision": res.decision, "chosen_source": res.chosen_source,
                "text_reliability": rec.get("text_reliability", res.text_reliability),
                "image_reliability": rec.get("image_reliability", res.image_reliability)}
    decision = routers.normalize_decision(rec.get("decision"))
    if not compose and decision == "COMPOSE":
        decision = "FALLBACK"
    return {"decision": decision, "chosen_source": routers.route_source(decision),
            "text_reliability": rec.get("text_reliability", ""), "image_reliability": rec.get("image_reliability", "")}


def replay_dataset(files: dict[str, dict], policies: dict[str, str]) -> dict[str, dict]:
    """method -> row_id -> recomputed record, from one dataset's choices files (method -> row_id -> record)."""
    sc = {rid: _gate(r, routers.self_check) for rid, r in files.get("selfcheck_gate", {}).items()}
    tri = {rid: _gate(r, routers.triage) for rid, r in files.get("triage_gate", {}).items()}
    for rid, r in files.get("cascaded_router", {}).items():
        sc.setdefault(rid, str(r.get("stage1_selfcheck", "")).upper())
        tri.setdefault(rid, str(r.get("stage2_triage", "")).upper())
    res = {name: {rid: _resolver(r, name == "source_aware_conductor") for rid, r in files.get(name, {}).items()}
           for name in RESOLVER_OF.values()}
    out: dict[str, dict] = defaultdict(dict)
    for rid, s in sc.items():
        out["selfcheck_gate"][rid] = {"decision": s, "chosen_source": routers.route_source(s)}
    for rid, t in tri.items():
        out["triage_gate"][rid] = {"decision": t, "chosen_source": routers.route_source(t)}
    for rid in files.get("cascaded_router", {}) or (sc.keys() & tri.keys()):
        d = routers.cascade(sc.get(rid, ""), tri.get(rid, ""))
        out["cascaded_router"][rid] = {"stage1_selfcheck": sc.get(rid, ""), "stage2_triage": tri.get(rid, ""),
                                       "decision": d, "chosen_source": routers.route_source(d)}
    for name, by in res.items():
        for rid, r in by.items():
            out[name][rid] = {"decision": r["decision"], "chosen_source": r["chosen_source"]}
    for m in GATED:
        resolver = res[RESOLVER_OF[m]]
        own = files.get(m, {})
        for rid in own or resolver:
            rec = own.get(rid, {})
            policy = policies.get(m) or rec.get("policy") or POLICY[m]
            given = {k: rec[k] for k in ("text_reliability", "image_reliability") if k in rec}
            r = resolver.get(rid, {}) | ({"decision": str(rec["resolver_decision"]).upper()}
                                         if "resolver_decision" in rec else {}) | given
            if "resolver_decision" in rec and rid not in resolver:
                r["chosen_source"] = routers.route_source(r["decision"]) if r["decision"] else ""
            s = str(rec["selfcheck_decision"]).upper() if "selfcheck_decision" in rec else sc.get(rid, "")
            out[m][rid] = gated_record(policy, s, r)
    return out


def replay(path: Path, out: Path, policies: dict[str, str] | None = None) -> dict:
    """Recompute every router's decisions under ``path``; write them under ``out``; agreement per method and
    dataset where the input carried decisions."""
    policies = policies or {}
    for m, p in policies.items():
        if m not in GATED or p not in routers.POLICIES:
            raise InputError("--policy", m, f"METHOD=POLICY with METHOD in {GATED}, POLICY in {routers.POLICIES}")
    root = choices_root(path)
    agreement: dict[str, dict] = defaultdict(dict)
    written = []
    for ds_dir in sorted(d for d in root.glob("*/*") if d.is_dir()):
        stack, ds = ds_dir.parent.name, ds_dir.name
        names: dict[str, tuple[Path, str]] = {}
        for f in sorted(ds_dir.glob("*.choices*.jsonl")):
            m = NAME.match(f.name)
            if m:
                names[m["method"]] = (f, m["n"])
        files = {m: read_choices(f) for m, (f, _) in names.items()}
        n_default = next(iter(names.values()))[1] if names else "0"
        for m, recs in replay_dataset(files, policies).items():
            src = files.get(m, {})
            rows = []
            for rid, rec in sorted(recs.items(), key=lambda kv: str(kv[0]).zfill(12)):
                base = {k: v for k, v in src.get(rid, {}).items() if k not in OUTPUT_FIELDS.get(m, ())}
                rows.append({"row_id": rid} | base | rec)
            n = names.get(m, (None, n_default))[1]
            target = out / "evaluation" / "choices" / stack / ds / f"{m}_{n}.choices.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(dumps(r, ensure_ascii=False) + "\n" for r in rows))
            written.append(str(target))
            keys = OUTPUT_FIELDS.get(m, ())
            checked = [(rid, src[rid]) for rid in recs if rid in src and all(k in src[rid] for k in keys)]
            if checked:
                agree = sum(all(str(given[k]).strip().lower() == str(recs[rid][k]).strip().lower() for k in keys)
                            for rid, given in checked)
                agreement[f"{stack}/{ds}"][m] = {"agree": agree, "of": len(checked), "fields": list(keys),
                                                 "disagree": [rid for rid, given in checked
                                                              if any(str(given[k]).strip().lower()
                                                                     != str(recs[rid][k]).strip().lower()
                                                                     for k in keys)][:20]}
    return {"root": str(root), "files": written, "agreement": dict(agreement), "policies": policies}
