"""The QIMG-7 audits: atomic factuality (Appendix I), evaluator sensitivity (G.6), human agreement (G.7).

All three start from judged rows (the release layout written by ``bench run``)
and a question's trusted clean evidence; they never re-run the answer models.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from mmaudit.rag.evaluate import schemas
from mmaudit.rag.evaluate.judge_labels import parse_verdict
from mmaudit.rag.evaluate.prompts import judge_prompt
from mmaudit.rag.evaluate.requests import many, user
from mmaudit.rag.evaluate.routers import parse_json
from mmaudit.rag.evaluate.score import LABEL_SCORES

ATOMIC_SCORES = {"supported": 1.0, "partially_supported": 0.5, "unsupported": 0.0, "uncertain": 0.0}
DECOMPOSE = """Split the answer below into atomic factual claims: single verifiable propositions. Keep every \
date, entity, place, number and causal claim exactly as written. Return JSON only: {{"claims": ["...", "..."]}}

Question: {question}
Answer: {answer}"""
LABELS = tuple(LABEL_SCORES)


def sample_questions(per: dict[str, dict[str, list[dict]]], per_dataset: int, seed: int = 0) -> set[tuple]:
    """A stratified, seeded draw of question ids: ``per_dataset`` from each dataset, all 16 regimes kept."""
    rng = np.random.default_rng(seed)
    out = set()
    datasets = sorted({ds for by in per.values() for ds in by})
    for ds in datasets:
        qids = sorted({str(r["qid"]) for by in per.values() for r in by.get(ds, [])})
        for i in rng.choice(len(qids), size=min(per_dataset, len(qids)), replace=False):
            out.add((ds, qids[int(i)]))
    return out


def parse_claims(text) -> list[str]:
    """The ``claims`` list of the JSON reply; a plain numbered list ("1. ...") is read too."""
    d = parse_json(text)
    if d is not None and isinstance(d.get("claims"), list):
        return [c.strip() for c in d["claims"] if isinstance(c, str) and c.strip()]
    return [m.group(1).strip() for m in re.finditer(r"^\s*\d+[.)]\s*(.+)$", text if isinstance(text, str) else "",
                                                   re.MULTILINE)]


def _score_table(scores: dict[str, dict[str, list[tuple[str, float]]]]) -> dict[str, dict[str, float]]:
    """method -> dataset -> [(regime, score)] => TC, TP, balanced (regime means per question already folded)."""
    out = {}
    for m, by in scores.items():
        tc = [np.mean([s for g, s in v if g.startswith("TC")] or [np.nan]) for v in by.values()]
        tp = [np.mean([s for g, s in v if g.startswith("TP")] or [np.nan]) for v in by.values()]
        t_c, t_p = float(np.nanmean(tc)), float(np.nanmean(tp))
        out[m] = {"tc": t_c, "tp": t_p, "drop": t_c - t_p, "balanced": (t_c + t_p) / 2}
    return out


def atomic_audit(per: dict, clean: dict[tuple, list[dict]], chat, judge=None, per_dataset: int = 5,
                 seed: int = 0) -> dict:
    """Decompose each sampled answer into claims, judge every claim against the clean evidence, average.

    An answer with no parsable claim scores 0 (recorded). Uncertain claims score 0 (Appendix I)."""
    judge = judge or chat
    chosen = sample_questions(per, per_dataset, seed)
    items = [(m, ds, r) for m, by in per.items() for ds, rows in by.items() for r in rows
             if (ds, str(r["qid"])) in chosen]
    # keyed by (dataset, qid): released qids repeat across datasets, and each must meet its own evidence
    answers = sorted({(ds, str(r["qid"]), r.get("question", ""), r["answer"]) for _, ds, r in items})
    decomposed = many(chat, [user(DECOMPOSE.format(question=q, answer=a)) for _, _, q, a in answers],
                      schema=schemas.CLAIMS)
    claims = {k: parse_claims(t) for k, t in zip(answers, decomposed)}
    claim_jobs = sorted({(ds, qid, c) for (ds, qid, _, _), cl in claims.items() for c in cl})
    question_of = {(ds, qid): q for ds, qid, q, _ in answers}
    raw = many(judge, [user(judge_prompt(question_of[(ds, qid)], c, clean.get((ds, qid), [])))
                       for ds, qid, c in claim_jobs], schema=schemas.JUDGE)
    claim_score = {job: ATOMIC_SCORES[parse_verdict(t)[0]] for job, t in zip(claim_jobs, raw)}
    scores: dict = defaultdict(lambda: defaultdict(list))
    empty = 0
    for m, ds, r in items:
        cl = claims[(ds, str(r["qid"]), r.get("question", ""), r["answer"])]
        empty += not cl
        s = float(np.mean([claim_score[(ds, str(r["qid"]), c)] for c in cl])) if cl else 0.0
        scores[m][(ds, str(r["qid"]))].append((r["regime"], s))
    return {"questions": len(chosen), "answers": len(answers), "claims": len(claim_jobs),
            "answers_without_claims": empty, "methods": _score_table(scores)}


def evaluator_sensitivity(per: dict, clean: dict[tuple, list[dict]], judges: dict[str, object],
                          per_dataset: int = 5, seed: int = 0) -> dict[str, dict[str, float]]:
    """Balanced support per method under each judge, on one stratified subset (G.6)."""
    chosen = sample_questions(per, per_dataset, seed)
    items = [(m, ds, r) for m, by in per.items() for ds, rows in by.items() for r in rows
             if (ds, str(r["qid"])) in chosen]
    out = {}
    for name, judge in judges.items():
        jobs = sorted({(ds, str(r["qid"]), r.get("question", ""), r["answer"]) for _, ds, r in items})
        raw = many(judge, [user(judge_prompt(q, a, clean.get((ds, qid), []))) for ds, qid, q, a in jobs],
                   schema=schemas.JUDGE)
        label = {j: parse_verdict(t)[1] for j, t in zip(jobs, raw)}
        scores: dict = defaultdict(lambda: defaultdict(list))
        for m, ds, r in items:
            scores[m][(ds, str(r["qid"]))].append((r["regime"], label[(ds, str(r["qid"]), r.get("question", ""),
                                                                       r["answer"])]))
        out[name] = {m: v["balanced"] for m, v in _score_table(scores).items()}
    return out


def cohen_kappa(a: list[str], b: list[str], weights: str | None = None, labels: tuple = LABELS) -> float:
    """Cohen's kappa between two label lists; ``weights="quadratic"`` for the weighted form (ordinal scale
    supported > partially_supported > uncertain > unsupported by score)."""
    order = sorted(labels, key=lambda x: -LABEL_SCORES[x])
    idx = {lab: i for i, lab in enumerate(order)}
    k = len(order)
    obs = np.zeros((k, k))
    for x, y in zip(a, b):
        obs[idx[x], idx[y]] += 1
    obs /= obs.sum()
    exp = np.outer(obs.sum(1), obs.sum(0))
    i, j = np.indices((k, k))
    w = ((i - j) ** 2) / (k - 1) ** 2 if weights == "quadratic" else (i != j).astype(float)
    denom = (w * exp).sum()
    return float(1 - (w * obs).sum() / denom) if denom else 1.0
