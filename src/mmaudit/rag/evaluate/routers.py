"""SATR and the baselines it is compared with: decisions parsed from model output, then deterministic rules.

Every router maps a row's three candidate answers (Parametric, Text-only,
Full-MM) plus its gate/resolver outputs to one final answer and a route, and
keeps the raw output it decided from. The rules are the paper's (Section 4,
Appendix E.5, G.1); where the paper leaves a detail to its released code it is
marked "choice" below and documented in docs/bench.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from difflib import SequenceMatcher

BRANCHES = ("PARAMETRIC", "TEXT_ONLY", "FULL_MM")
# the branch a route answers from, in the release's source names; COMPOSE writes its own answer
ROUTE_SOURCE = {"FALLBACK": "parametric", "PARAMETRIC": "parametric", "TEXT_ONLY": "text_only",
                "FULL_MM": "full_mm", "COMPOSE": "composed"}


def route_source(route: str) -> str:
    """'CONSENSUS:TEXT_ONLY' -> 'text_only', 'FALLBACK' -> 'parametric', 'COMPOSE' -> 'composed'."""
    r = str(route).split(":")[-1]
    return ROUTE_SOURCE.get(r, r.lower())
TEXT_STATES = ("trustworthy", "conflicting", "weak", "suspicious")


@dataclass(frozen=True)
class Candidates:
    parametric: str
    text_only: str
    full_mm: str

    def pick(self, route: str) -> str:
        return {"PARAMETRIC": self.parametric, "FALLBACK": self.parametric, "TEXT_ONLY": self.text_only,
                "FULL_MM": self.full_mm}[route]


@dataclass(frozen=True)
class Routed:
    answer: str
    route: str  # FULL_MM | TEXT_ONLY | FALLBACK | COMPOSE | CONSENSUS:<branch>
    raw: str = ""  # the model output the decision came from (stored with the decision)
    parsed: bool = True


def parse_json(text: str) -> dict | None:
    """The first JSON object in a model reply (code fences and chatter around it are tolerated)."""
    if not isinstance(text, str):
        return None
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def norm(value) -> str:
    return re.sub(r"[\s\-]+", "_", str(value).strip()).upper() if value is not None else ""


# ------------------------------------------------------------------ Answer-Consensus (Appendix G.1)

def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def token_f1(a: str, b: str) -> float:
    """F_tok = 2 o(a, b) / (|T_a| + |T_b|), o the multiset overlap of tokens."""
    ta, tb = tokens(a), tokens(b)
    if not ta and not tb:
        return 1.0
    overlap = sum(min(ta.count(t), tb.count(t)) for t in set(ta))
    return 2 * overlap / (len(ta) + len(tb))


def similarity(a: str, b: str) -> float:
    """S = 0.7 F_tok + 0.3 R_seq, R_seq difflib's sequence ratio."""
    return 0.7 * token_f1(a, b) + 0.3 * SequenceMatcher(None, a, b).ratio()


def answer_consensus(c: Candidates) -> Routed:
    """The most central candidate: argmax over i of sum_{j != i} S(a_i, a_j); ties go to the earlier branch
    in the order Parametric, Text-only, Full-MM (choice)."""
    answers = [c.parametric, c.text_only, c.full_mm]
    scores = [sum(similarity(a, b) for j, b in enumerate(answers) if j != i) for i, a in enumerate(answers)]
    best = max(range(3), key=lambda i: (scores[i], -i))
    return Routed(answers[best], f"CONSENSUS:{BRANCHES[best]}", json.dumps({"scores": scores}))


# ------------------------------------------------------------------ gates and routers

def self_check(raw: str) -> tuple[str, bool]:
    """E.4: TRUST or FALLBACK; anything else is unparsed and treated as FALLBACK (choice: fail safe)."""
    d = parse_json(raw) or {}
    decision = norm(d.get("decision"))
    return (decision, True) if decision in ("TRUST", "FALLBACK") else ("FALLBACK", False)


def triage(raw: str) -> tuple[str, bool]:
    """E.2: FULL_MM, TEXT_ONLY or FALLBACK; anything else is unparsed and treated as FALLBACK (choice)."""
    d = parse_json(raw) or {}
    decision = norm(d.get("decision"))
    return (decision, True) if decision in ("FULL_MM", "TEXT_ONLY", "FALLBACK") else ("FALLBACK", False)


def self_check_gate(c: Candidates, raw: str) -> Routed:
    decision, ok = self_check(raw)
    route = "FULL_MM" if decision == "TRUST" else "FALLBACK"
    return Routed(c.pick(route), route, raw, ok)


def triage_gate(c: Candidates, raw: str) -> Routed:
    route, ok = triage(raw)
    return Routed(c.pick(route), route, raw, ok)


def cascaded_router(c: Candidates, self_check_raw: str, triage_raw: str) -> Routed:
    """E.5: the self-check gate first; on FALLBACK the Parametric answer, else the triage gate's route."""
    decision, ok1 = self_check(self_check_raw)
    if decision == "FALLBACK":
        return Routed(c.parametric, "FALLBACK", self_check_raw, ok1)
    route, ok2 = triage(triage_raw)
    return Routed(c.pick(route), route, triage_raw, ok1 and ok2)


def text_trust_state(raw: str) -> tuple[str, bool]:
    """TextTrust's four states; unparsed output counts as not trustworthy (choice: fail safe)."""
    d = parse_json(raw) or {}
    state = str(d.get("text_reliability", d.get("state", ""))).strip().lower()
    return (state, True) if state in TEXT_STATES else ("suspicious", False)


def text_trust(c: Candidates, raw: str) -> Routed:
    """Trustworthy text -> the row's Text-only answer; otherwise the Parametric answer."""
    state, ok = text_trust_state(raw)
    route = "TEXT_ONLY" if state == "trustworthy" else "FALLBACK"
    return Routed(c.pick(route), route, raw, ok)


def field_selector(c: Candidates, raw: str) -> Routed:
    """Section 4.4: conflicting / suspicious / weak text -> Parametric; else TEXT_ONLY -> Text-only and
    FULL_MM -> Full-MM; every other decision (FALLBACK, COMPOSE, missing, malformed) -> Parametric."""
    d = parse_json(raw)
    if d is None:
        return Routed(c.parametric, "FALLBACK", raw, False)
    text_rel = str(d.get("text_reliability", "")).strip().lower()
    decision = norm(d.get("decision"))
    if text_rel in ("conflicting", "suspicious", "weak"):
        return Routed(c.parametric, "FALLBACK", raw)
    if decision in ("TEXT_ONLY", "FULL_MM"):
        return Routed(c.pick(decision), decision, raw)
    return Routed(c.parametric, "FALLBACK", raw, decision in ("FALLBACK", "COMPOSE"))


def soft_conductor(c: Candidates, raw: str, self_check_raw: str) -> Routed:
    """Composition-enabled SATR (the paper defers its exact rules to released code; choice, documented):
    a self-check FALLBACK or unreliable text -> Parametric; COMPOSE with a non-empty final_answer -> that
    answer; TEXT_ONLY / FULL_MM -> that branch; anything else -> Parametric."""
    check, ok = self_check(self_check_raw)
    d = parse_json(raw)
    if d is None:
        return Routed(c.parametric, "FALLBACK", raw, False)
    if check == "FALLBACK" or str(d.get("text_reliability", "")).strip().lower() in ("conflicting", "suspicious"):
        return Routed(c.parametric, "FALLBACK", raw, ok)
    decision = norm(d.get("decision"))
    final = d.get("final_answer")
    if decision == "COMPOSE" and isinstance(final, str) and final.strip():
        return Routed(final.strip(), "COMPOSE", raw)
    if decision in ("TEXT_ONLY", "FULL_MM"):
        return Routed(c.pick(decision), decision, raw)
    return Routed(c.parametric, "FALLBACK", raw, decision in ("FALLBACK", "COMPOSE"))
