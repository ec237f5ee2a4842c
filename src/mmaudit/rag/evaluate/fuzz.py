"""Malformed model outputs, generated, and what every QIMG-7 parser makes of them.

Used by the fuzz test and ``benchmarks/reliability.py``: each parser must map
every output to its documented fallback (counted), and no exception may escape.
"""

from __future__ import annotations

import json
import random
from collections import Counter

LABELS = ("TRUST", "FALLBACK", "FULL_MM", "TEXT_ONLY", "COMPOSE", "supported", "partially_supported",
          "unsupported", "uncertain", "trustworthy", "conflicting", "weak", "suspicious", "high", "low")
KEYS = ("decision", "label", "score", "text_reliability", "image_reliability", "final_answer", "claims", "type",
        "polluted", "rationale", "reason", "chosen_source")
JUNK = ("", " ", "null", "None", "{}", "[]", "{", "}", '{"', "```json", "```", "\\", "\x00", "\ufeff",
        "naïve café ☃ 中文 🙂", "\u202e", "NaN", "Infinity", "1e999", "-0", "true")


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice(LABELS)
    if kind == 1:
        return rng.choice(LABELS).lower() if rng.random() < 0.5 else f" {rng.choice(LABELS)}! "
    if kind == 2:
        return rng.choice([None, True, False, 0, 1, -1, 0.25, 1e308, float("nan")])
    if kind == 3:
        return rng.choice(JUNK)
    if kind == 4:
        return "x" * rng.choice([1, 1000, 100_000])
    if kind == 5 and depth < 3:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6 and depth < 3:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    if kind == 7:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(30)))
    return rng.choice(LABELS) + rng.choice(["", "_MM", "ONLY", "?"])


def malformed(n: int, seed: int = 0) -> list:
    """``n`` outputs: truncated JSON, wrong types, prose around JSON, unknown labels, unicode, huge, empty,
    deep nesting, non-strings."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        obj = {rng.choice(KEYS): _value(rng) for _ in range(rng.randrange(6))}
        try:
            text = json.dumps(obj, allow_nan=True)
        except (TypeError, ValueError):
            text = str(obj)
        kind = i % 10
        if kind == 0:
            text = text[: rng.randrange(len(text) + 1)]  # truncated
        elif kind == 1:
            text = f"Sure! Here is my answer:\n```json\n{text}\n```\nHope that helps."
        elif kind == 2:
            text = rng.choice(JUNK)
        elif kind == 3:
            text = "[" * rng.choice([10, 5000]) + "]" * rng.choice([0, 10])  # deep nesting
        elif kind == 4:
            text = json.dumps(_value(rng))  # a JSON value that is not an object
        elif kind == 5:
            text = text + text[::-1]
        elif kind == 6:
            text = "\n".join(f"{k}: {rng.choice(LABELS)}" for k in rng.sample(KEYS, 3))
        elif kind == 7:
            out.append(rng.choice([None, 0, 3.5, ["list"], {"dict": 1}, b"bytes"]))  # not even a string
            continue
        out.append(text)
    return out


def parsers() -> dict:
    """Every parser of a structured QIMG-7 output, as (name -> function returning its outcome label)."""
    from mmaudit.rag.construct.text_pollution import parse_reply
    from mmaudit.rag.evaluate.audits import parse_claims
    from mmaudit.rag.evaluate.judge_labels import parse_verdict
    from mmaudit.rag.evaluate.routers import Candidates, resolve, self_check, text_trust_state, triage

    c = Candidates("p", "t", "m")

    def polluter(raw) -> str:
        try:
            parse_reply(raw, "Conflicting")
            return "parsed"
        except ValueError:
            return "rejected (retried, then the question is dropped)"

    return {
        "self_check": lambda r: "parsed" if self_check(r)[1] else f"unparsed -> {self_check(r)[0]}",
        "triage": lambda r: "parsed" if triage(r)[1] else f"unparsed -> {triage(r)[0]}",
        "text_trust": lambda r: "parsed" if text_trust_state(r)[1] else "unparsed -> suspicious",
        "resolver_select": lambda r: "parsed" if resolve(c, r, False).parsed else
        f"unparsed -> {resolve(c, r, False).decision}",
        "resolver_compose": lambda r: "parsed" if resolve(c, r, True).parsed else
        f"unparsed -> {resolve(c, r, True).decision}",
        "judge": lambda r: "parsed" if parse_verdict(r)[2] else "unparsed -> uncertain (0.25)",
        "polluter": polluter,
        "atomic_claims": lambda r: "claims" if parse_claims(r) else "no claims (scored 0)",
    }


def fuzz(n: int = 10_000, seed: int = 0) -> dict:
    """Outcome counts per parser over ``n`` malformed outputs, and the exceptions that escaped (none, we hope)."""
    outputs = malformed(n, seed)
    report = {}
    for name, fn in parsers().items():
        counts: Counter = Counter()
        escaped: list[str] = []
        for raw in outputs:
            try:
                counts[fn(raw)] += 1
            except Exception as e:  # noqa: BLE001 - counting what escapes is the point
                escaped.append(f"{type(e).__name__}: {str(e)[:80]}")
        report[name] = {"outputs": n, "outcomes": dict(counts), "exceptions": len(escaped),
                        "examples": escaped[:3]}
    return report
