"""A SATR router from a plugin: the answer two of the three branches agree on (normalised), else Full-MM's."""

from __future__ import annotations

from mmaudit.normalise import answer as normalise
from mmaudit.rag.evaluate.methods import router
from mmaudit.rag.evaluate.routers import Routed


@router("tp_majority_vote", display="Plugin majority vote")
def majority_vote(c, replies):
    branches = {"PARAMETRIC": c.parametric, "TEXT_ONLY": c.text_only, "FULL_MM": c.full_mm}
    for route, answer in branches.items():
        if sum(normalise(a) == normalise(answer) for a in branches.values()) >= 2:
            return Routed(answer, route), tuple(branches.values())
    return Routed(c.full_mm, "FULL_MM"), tuple(branches.values())
