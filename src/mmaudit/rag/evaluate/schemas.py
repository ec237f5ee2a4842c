"""The JSON every structured QIMG-7 component must return, as JSON Schemas.

One schema per component, used two ways: an OpenAI-compatible endpoint gets it
as ``response_format`` (vLLM, llama.cpp server, Ollama and hosted APIs decode
under it), and the embedded model decodes under it (mmaudit.models.chat.guided).
Property order is the order a guided decoder fills them: labels first, free
text last, so a short token budget never cuts a label. Every schema is strict
(all properties required, no others), as OpenAI's strict mode requires.
"""

from __future__ import annotations

from mmaudit.rag.evaluate.routers import CONFLICT_STATES, IMAGE_STATES, TEXT_STATES

JUDGE_LABELS = ("supported", "partially_supported", "unsupported", "uncertain")
RESOLVER_FIELDS = ("text_reliability", "image_reliability", "internal_external_conflict", "cross_modal_conflict",
                   "candidate_scores")  # the structured fields a G.8 ablation may remove


def _obj(name: str, props: dict) -> dict:
    return {"name": name, "schema": {"type": "object", "properties": props, "required": list(props),
                                     "additionalProperties": False}}


def _enum(values) -> dict:
    return {"type": "string", "enum": list(values)}


TEXT = {"type": "string"}

SELF_CHECK = _obj("self_check", {"decision": _enum(("TRUST", "FALLBACK")), "reason": TEXT})
TRIAGE = _obj("triage", {"decision": _enum(("FULL_MM", "TEXT_ONLY", "FALLBACK")), "reason": TEXT})
TEXT_TRUST = _obj("text_trust", {"text_reliability": _enum(TEXT_STATES), "reason": TEXT})
JUDGE = _obj("judge", {"label": _enum(JUDGE_LABELS),
                       "score": {"type": "number", "enum": [1.0, 0.5, 0.0, 0.25]}, "reason": TEXT})
CLAIMS = _obj("atomic_claims", {"claims": {"type": "array", "items": TEXT}})


def resolver(compose: bool, disabled: frozenset[str] | set[str] = frozenset()) -> dict:
    """E.3's output: reliability and conflict fields, candidate scores, decision, source, answer, reason;
    ``disabled`` fields (a G.8 ablation) are left out of the schema as they are out of the prompt."""
    decisions = ("FULL_MM", "TEXT_ONLY", "FALLBACK") + (("COMPOSE",) if compose else ())
    sources = ("full_mm", "text_only", "parametric") + (("composed",) if compose else ())
    score = {"type": "integer", "enum": [0, 1]}
    props = {"text_reliability": _enum(TEXT_STATES), "image_reliability": _enum(IMAGE_STATES),
             "internal_external_conflict": _enum(CONFLICT_STATES), "cross_modal_conflict": _enum(CONFLICT_STATES),
             "candidate_scores": {"type": "object", "properties": {k: score for k in ("FALLBACK", "TEXT_ONLY",
                                                                                       "FULL_MM")},
                                  "required": ["FALLBACK", "TEXT_ONLY", "FULL_MM"], "additionalProperties": False},
             "decision": _enum(decisions), "chosen_source": _enum(sources), "final_answer": TEXT, "reason": TEXT}
    for f in disabled:
        props.pop(f, None)
    return _obj("resolver_compose" if compose else "resolver_select", props)
