"""Delivery channels and defences: each pixel attack bare, non-adaptive and adaptive, side by side.

For a model audited behind a pipeline (``zoo-L1~jpeg:75``, :mod:`mmaudit.models.channel`) and its bare model in
the same run, per pixel attack:

* **bare**: the attack on the bare model, over the bare model's clean-correct set (what an audit that assumes the
  image arrives bit for bit reports);
* **non-adaptive**: the bare model's own perturbations, sent through the pipeline, over the pipeline's
  clean-correct set. A question the bare model had no perturbation for (it was not in the bare model's C, so its
  attack never ran there) is shown its clean image, which the pipeline answers right: not flipped. So this column
  shares the adaptive one's denominator, question by question;
* **adaptive**: the attack made through the pipeline (the real transform in the forward pass, the stand-in's or
  the identity's gradient, EOT over random draws), over the same set.

R+ is given the same three ways (the rendered-text attacks need no gradient, so they count alike in the last two).
Where the adaptive ASR is at least ``MASKED_RATIO`` times the non-adaptive one and ``MASKED_POINTS`` above it, a
warning says an evaluation that ignores the pipeline reports robustness that is not there (Athalye et al., 2018;
AutoAttack warns the same way).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.pathways import registry
from mmaudit.report.risk import flags_by_fingerprint, wanted
from mmaudit.stats import ModelFlags, bootstrap_level_ci, union
from mmaudit.store import RunStore

MASKED_RATIO = 2.0  # adaptive ASR at least this many times the non-adaptive one ...
MASKED_POINTS = 0.10  # ... and this far above it: the warning


def non_adaptive_flips(store: RunStore, attack_params: dict | None) -> dict[tuple[str, str], dict[str, bool]]:
    """(model behind a pipeline, attack) -> per sample, whether its bare model's perturbation flipped it."""
    out: dict[tuple[str, str], dict[str, bool]] = defaultdict(dict)
    for r in store.records("transfer"):
        if r.get("non_adaptive") and wanted(r, attack_params) and not r.get("error"):
            out[(r["fingerprint"], r["attack"])][r["sample"]] = r["flipped"]
    return out


def channel_summary(store: RunStore, attack_params: dict | None, n_boot: int, seed: int) -> dict | None:
    """Per model behind a pipeline: its pipeline, and per pixel attack (then R+) the three figures with their
    question-bootstrap CIs; the warnings. None when no model of the run is behind a pipeline."""
    behind = {r["fingerprint"]: r for r in store.records("model") if r.get("bare_fingerprint")}
    if not behind:
        return None
    flags = flags_by_fingerprint(store, attack_params)
    moved = non_adaptive_flips(store, attack_params)

    def estimate(m: ModelFlags | None, flipped: np.ndarray | None) -> list[float] | None:
        if m is None or flipped is None:
            return None
        return list(bootstrap_level_ci([ModelFlags(m.model, m.level, m.questions, m.correct, {"x": flipped})],
                                       lambda x: x.flipped["x"], n_boot, seed))

    rows, warnings = [], []
    for fp, meta in sorted(behind.items(), key=lambda kv: kv[1]["model"]):
        m, bare = flags.get(fp), flags.get(meta["bare_fingerprint"])
        if m is None:
            continue
        # the pixel attacks run through the pipeline (adaptive) or shown to it from the bare model (a transfer
        # target behind a channel has only the latter)
        ran = [a for a in m.flipped if registry.is_pixel(a) and a not in m.not_run]
        pixel = ran + [a for f, a in moved if f == fp and a not in ran]
        na = {a: np.array([moved.get((fp, a), {}).get(q, False) for q in m.questions]) for a in pixel
              if (fp, a) in moved}
        text = {a: f for a, f in m.flipped.items() if not registry.is_pixel(a) and a not in m.not_run}
        attacks = []
        for a in pixel:
            row = {"attack": a, "bare": estimate(bare, bare.flipped.get(a) if bare else None),
                   "non_adaptive": estimate(m, na.get(a)), "adaptive": estimate(m, m.flipped[a] if a in ran else None)}
            attacks.append(row)
            if row["non_adaptive"] and row["adaptive"] and masked(row["adaptive"][0], row["non_adaptive"][0]):
                warnings.append(f"{registry.display(a)} on {m.model}: adaptive ASR {100 * row['adaptive'][0]:.1f}% "
                                f"against {100 * row['non_adaptive'][0]:.1f}% for the bare model's perturbations "
                                "sent through the pipeline: an evaluation that ignores the pipeline reports "
                                "robustness that is not there")
        r_plus = {"bare": estimate(bare, union(bare, list(bare.flipped)) if bare else None),
                  "non_adaptive": estimate(m, union(ModelFlags(m.model, m.level, m.questions, m.correct, text | na),
                                                    list(text | na))) if na else None,
                  "adaptive": estimate(m, union(m, list(m.flipped))) if ran else None}
        rows.append({"model": m.model, "level": m.level, "fingerprint": fp, "bare_model": meta["bare_model"],
                     "channel": meta.get("channel"), "defence": meta.get("defence"),
                     "n_correct": int(m.correct.sum()), "bare_n_correct": int(bare.correct.sum()) if bare else None,
                     "attacks": attacks, "r_plus": r_plus})
    return {"models": rows, "warnings": warnings}


def masked(adaptive: float, non_adaptive: float) -> bool:
    """Whether the adaptive attack breaks through far more than the non-adaptive one."""
    return adaptive >= MASKED_RATIO * non_adaptive and adaptive - non_adaptive >= MASKED_POINTS


def channel_tables(summary: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table per run with models behind a pipeline: bare / non-adaptive / adaptive per pixel attack and R+."""
    from mmaudit.report.tables import ci

    ch = summary.get("channels")
    if not ch:
        return []
    rows = []
    for m in ch["models"]:
        pipeline = " · ".join(f"{k} {m[k]}" for k in ("channel", "defence") if m[k])
        for name, r in [(registry.display(a["attack"]), a) for a in m["attacks"]] + [("R+", m["r_plus"])]:
            rows.append([m["bare_model"], pipeline, name] + [ci(r[k]) if r[k] else "n/a"
                                                              for k in ("bare", "non_adaptive", "adaptive")])
    return [("Delivery channel and defence: ASR % bare (the bare model's C), non-adaptive (its perturbations sent "
             "through the pipeline) and adaptive (attacked through it), both over the pipeline's C, 95% CI",
             ["model", "pipeline", "attack", "bare", "non-adaptive", "adaptive"], rows)]


def channel_sentence(summary: dict) -> str | None:
    """The headline's line: R+ behind each pipeline against its bare model's, and how many attacks only the
    adaptive version breaks through."""
    ch = summary.get("channels")
    if not ch or not ch["models"]:
        return None
    parts = []
    for m in ch["models"]:
        r = m["r_plus"]
        if not r["adaptive"]:  # shown the bare models' images only (a transfer target): the table has it
            continue
        na = f", non-adaptive {100 * r['non_adaptive'][0]:.1f}%" if r["non_adaptive"] else ""
        bare = f" (bare {100 * r['bare'][0]:.1f}%{na})" if r["bare"] else ""
        parts.append(f"{m['model']} {100 * r['adaptive'][0]:.1f}% [{100 * r['adaptive'][1]:.1f}, "
                     f"{100 * r['adaptive'][2]:.1f}]{bare}")
    if not parts:
        return None
    text = f"Behind the delivery pipeline, R+ with adaptive attacks: {'; '.join(parts)}."
    if ch["warnings"]:
        text += (f" {len(ch['warnings'])} attack{'s' if len(ch['warnings']) > 1 else ''} broke through only when "
                 "adaptive: a non-adaptive evaluation of the pipeline would report robustness that is not there.")
    return text
