"""SATR and the baselines it is compared with: decisions parsed from model output, then deterministic rules.

Every router maps a row's three candidate answers (Parametric, Text-only,
Full-MM) plus its gate/resolver outputs to one final answer, a decision and the
source it answered from, and keeps the raw output it decided from. The paper
(Section 4, Appendix E.5, G.1) defers the post-processing to the authors'
released code (``code/routing/`` of mbzuai-nlp/Trust_Before_Fusion); the rules
below follow that code's behaviour, value by value, including how it reads
empty and malformed outputs. Where ours differ, docs/bench.md says so.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

from mmaudit.models.chat import parse_json
from mmaudit.normalise import alnum, lowered

BRANCHES = ("PARAMETRIC", "TEXT_ONLY", "FULL_MM")
SOURCES = ("parametric", "text_only", "full_mm")  # the release's source names, in its order
# the branch a decision answers from; COMPOSE writes its own answer
ROUTE_SOURCE = {"FALLBACK": "parametric", "PARAMETRIC": "parametric", "TEXT_ONLY": "text_only",
                "FULL_MM": "full_mm", "COMPOSE": "composed", "TRUST": "full_mm"}
TEXT_STATES = ("trustworthy", "conflicting", "weak", "suspicious")  # the resolver's / TextTrust's vocabulary
IMAGE_STATES = ("trustworthy", "suspicious", "weak", "irrelevant")
CONFLICT_STATES = ("yes", "no", "unclear")
# the values the release's post-processing reads as bad or good text (its prompt asks for TEXT_STATES)
BAD_TEXT = frozenset({"conflicting", "suspicious", "weak", "low", "unreliable"})
GOOD_TEXT = frozenset({"trustworthy", "high", "medium", "reliable"})
POLICIES = ("strict", "soft", "field", "conservative")


def route_source(route: str) -> str:
    """'CONSENSUS:TEXT_ONLY' -> 'text_only', 'FALLBACK' -> 'parametric', 'COMPOSE' -> 'composed'."""
    r = str(route).split(":")[-1]
    return ROUTE_SOURCE.get(r, r.lower())


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
    route: str  # the final decision: FULL_MM | TEXT_ONLY | FALLBACK | COMPOSE | RESOLVER | CONSENSUS:<branch>
    raw: str = ""  # the model output the decision came from (stored with the decision)
    parsed: bool = True
    source: str = ""  # the release's chosen_source; derived from the route when not given

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", route_source(self.route))


# ------------------------------------------------------------------ Answer-Consensus (Appendix G.1)

def token_f1(a: str, b: str) -> float:
    """F_tok = 2 o(a, b) / (|T_a| + |T_b|) over lower-cased alphanumeric tokens, o the multiset overlap."""
    ta, tb = alnum(a).split(), alnum(b).split()
    if not ta and not tb:
        return 1.0
    if not ta or not tb:
        return 0.0
    return 2 * sum((Counter(ta) & Counter(tb)).values()) / (len(ta) + len(tb))


def seq_ratio(a: str, b: str) -> float:
    na, nb = alnum(a), alnum(b)
    if not na and not nb:
        return 1.0
    if not na or not nb:
        return 0.0
    return SequenceMatcher(None, na, nb).ratio()


def similarity(a: str, b: str) -> float:
    """S = 0.7 F_tok + 0.3 R_seq on the normalised texts."""
    return 0.7 * token_f1(a, b) + 0.3 * seq_ratio(a, b)


def answer_consensus(c: Candidates, threshold: float = 0.55, tie_break: str = "text_only") -> Routed:
    """The most central candidate (mean similarity to the other two). When the most similar pair reaches
    ``threshold``, only that pair competes; ties go to ``tie_break``, then to the longer answer."""
    answers = dict(zip(SOURCES, (c.parametric, c.text_only, c.full_mm)))
    pairs = {(a, b): similarity(answers[a], answers[b]) for i, a in enumerate(SOURCES) for b in SOURCES[i + 1:]}
    mean = {s: sum(v for p, v in pairs.items() if s in p) / 2 for s in SOURCES}
    best_pair, best = max(pairs.items(), key=lambda kv: kv[1])
    pool = best_pair if best >= threshold else SOURCES
    chosen = max(pool, key=lambda s: (mean[s], s == tie_break, len(answers[s])))
    info = {"pairwise": {"__".join(p): v for p, v in pairs.items()}, "average": mean,
            "consensus_pair_used": best >= threshold, "threshold": threshold, "tie_break": tie_break}
    return Routed(answers[chosen], f"CONSENSUS:{BRANCHES[SOURCES.index(chosen)]}", json.dumps(info))


# ------------------------------------------------------------------ gate outputs

def self_check(raw) -> tuple[str, bool]:
    """E.4 as released: FALLBACK when the reply says FALLBACK anywhere, TRUST otherwise (an empty or
    malformed reply trusts). ``parsed`` says whether the reply was the asked-for JSON."""
    text = raw if isinstance(raw, str) else ""
    decision = "FALLBACK" if "FALLBACK" in text.upper() else "TRUST"
    d = parse_json(text) or {}
    return decision, str(d.get("decision", "")).strip().upper() in ("TRUST", "FALLBACK")


def triage(raw) -> tuple[str, bool]:
    """E.2 as released: the JSON ``decision`` if it is FULL_MM / TEXT_ONLY / FALLBACK, else a
    ``"decision": "<label>"`` found in the text, else FALLBACK (unparsed)."""
    text = raw if isinstance(raw, str) else ""
    d = parse_json(text) or {}
    decision = str(d.get("decision", "")).upper().strip()
    if decision in BRANCHES[1:] + ("FALLBACK",):
        return decision, True
    m = re.search(r'"DECISION"\s*:\s*"(FULL_MM|TEXT_ONLY|FALLBACK)"', text.upper())
    return (m.group(1), True) if m else ("FALLBACK", False)


def self_check_gate(c: Candidates, raw: str) -> Routed:
    decision, ok = self_check(raw)
    route = "FULL_MM" if decision == "TRUST" else "FALLBACK"
    return Routed(c.pick(route), route, raw, ok)


def triage_gate(c: Candidates, raw: str) -> Routed:
    route, ok = triage(raw)
    return Routed(c.pick(route), route, raw, ok)


def cascade(selfcheck_decision: str, triage_decision: str) -> str:
    """E.5: a self-check FALLBACK answers parametrically; otherwise the triage decision, FALLBACK unless
    it is TEXT_ONLY or FULL_MM."""
    if str(selfcheck_decision).upper() == "FALLBACK":
        return "FALLBACK"
    t = str(triage_decision).upper()
    return t if t in ("TEXT_ONLY", "FULL_MM") else "FALLBACK"


def cascaded_router(c: Candidates, self_check_raw: str, triage_raw: str) -> Routed:
    (s, ok1), (t, ok2) = self_check(self_check_raw), triage(triage_raw)
    route = cascade(s, t)
    return Routed(c.pick(route), route, self_check_raw if s == "FALLBACK" else triage_raw,
                  ok1 and (ok2 or s == "FALLBACK"))


def text_trust_state(raw) -> tuple[str, bool]:
    """TextTrust's state (not in the release: ours). Unparsed output counts as not trustworthy (fail safe)."""
    d = parse_json(raw) or {}
    state = lowered(d.get("text_reliability", d.get("state", "")))
    return (state, True) if state in TEXT_STATES or state in GOOD_TEXT | BAD_TEXT else ("suspicious", False)


def text_trust(c: Candidates, raw: str) -> Routed:
    """Trustworthy text -> the row's Text-only answer; otherwise the Parametric answer."""
    state, ok = text_trust_state(raw)
    route = "TEXT_ONLY" if state in GOOD_TEXT else "FALLBACK"
    return Routed(c.pick(route), route, raw, ok)


# ------------------------------------------------------------------ the source-aware resolver (E.3)

def normalize_decision(value) -> str:
    """The release's reading of a resolver decision: FULL... -> FULL_MM, TEXT... -> TEXT_ONLY, PARAM... or
    FALLBACK -> FALLBACK, COMPOSE / SYNTH... -> COMPOSE, anything else -> FALLBACK (in that order)."""
    x = str(value or "").upper().strip()
    for key, label in (("FULL", "FULL_MM"), ("TEXT", "TEXT_ONLY"), ("PARAM", "FALLBACK"), ("FALLBACK", "FALLBACK"),
                       ("COMPOSE", "COMPOSE"), ("SYNTH", "COMPOSE")):
        if key in x:
            return label
    return "FALLBACK"


@dataclass(frozen=True)
class Resolution:
    """One resolver call read as the release reads it: its decision, the source it answers from, its answer,
    the reliability fields (as given) and whether the reply was the asked-for JSON."""

    decision: str  # FULL_MM | TEXT_ONLY | FALLBACK | COMPOSE
    chosen_source: str  # full_mm | text_only | parametric | composed
    answer: str
    text_reliability: str
    image_reliability: str
    parsed: bool
    raw: str = ""


def resolve(c: Candidates, raw, compose: bool, disabled: frozenset[str] | set[str] = frozenset()) -> Resolution:
    """Source-aware selector (``compose=False``: COMPOSE is read as FALLBACK) or conductor (``compose=True``:
    a COMPOSE with a non-empty final_answer answers with it, an empty one falls back)."""
    obj = parse_json(raw)
    parsed = obj is not None and str(obj.get("decision", "")).upper().strip() in (*BRANCHES[1:], "FALLBACK",
                                                                                    "COMPOSE")
    obj = obj if obj is not None else {"decision": "FALLBACK"}
    decision = normalize_decision(obj.get("decision"))
    if not compose and decision == "COMPOSE":
        decision = "FALLBACK"
    answer = c.parametric
    if decision in ("FULL_MM", "TEXT_ONLY"):
        answer = c.pick(decision)
    elif decision == "COMPOSE":
        answer = str(obj.get("final_answer", "")).strip()
        if not answer:
            decision, answer = "FALLBACK", c.parametric
    return Resolution(decision, route_source(decision), answer,
                      "" if "text_reliability" in disabled else str(obj.get("text_reliability", "") or ""),
                      "" if "image_reliability" in disabled else str(obj.get("image_reliability", "") or ""),
                      parsed, raw if isinstance(raw, str) else "")


def use_resolver(policy: str, selfcheck_decision: str, resolver_decision: str, text_reliability: str) -> bool:
    """The release's gated post-processing. ``strict``: unless the self-check fell back; ``soft``: unless the
    self-check fell back, and then still when the text reads good and the resolver did not fall back;
    ``field``: unless the text reads bad or the resolver fell back (or gave nothing); ``conservative``: all
    three conditions."""
    sc, dec, text = str(selfcheck_decision or "").upper(), str(resolver_decision or "").upper(), lowered(
        text_reliability)
    resolver_ok = dec not in ("FALLBACK", "")
    if policy == "strict":
        return sc != "FALLBACK"
    if policy == "soft":
        return sc != "FALLBACK" or (text in GOOD_TEXT and resolver_ok)
    if policy == "field":
        return text not in BAD_TEXT and resolver_ok
    if policy == "conservative":
        return sc != "FALLBACK" and text not in BAD_TEXT and resolver_ok
    raise ValueError(f"unknown policy {policy!r}; choose from {POLICIES}")


def gated(policy: str, selfcheck_decision: str, resolver_decision: str, resolver_source: str,
          text_reliability: str) -> tuple[str, str]:
    """(final_decision, chosen_source) of a gated router: the resolver's own decision and source (RESOLVER /
    'resolver' where it gave none), or FALLBACK / 'parametric'."""
    if use_resolver(policy, selfcheck_decision, resolver_decision, text_reliability):
        return str(resolver_decision or "").upper() or "RESOLVER", lowered(resolver_source) or "resolver"
    return "FALLBACK", "parametric"


def gated_router(policy: str, c: Candidates, res: Resolution, self_check_raw: str | None = None) -> Routed:
    sc = self_check(self_check_raw)[0] if self_check_raw is not None else ""
    decision, source = gated(policy, sc, res.decision, res.chosen_source, res.text_reliability)
    answer = res.answer if use_resolver(policy, sc, res.decision, res.text_reliability) else c.parametric
    return Routed(answer, decision, res.raw, res.parsed, source)


def field_selector(c: Candidates, raw: str, self_check_raw: str | None = None) -> Routed:
    """Section 4.4 / Algorithm 1: the select-only resolver under the ``field`` policy."""
    return gated_router("field", c, resolve(c, raw, compose=False), self_check_raw)


def soft_conductor(c: Candidates, raw: str, self_check_raw: str) -> Routed:
    """The composing resolver under the ``soft`` policy (it reads the self-check decision)."""
    return gated_router("soft", c, resolve(c, raw, compose=True), self_check_raw)
