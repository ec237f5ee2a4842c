"""Transfer results rebuilt from the store: the source x target matrix and each target's black-box residual risk.

* Transfer ASR of (source, attack) on a target: the share of the target's clean-correct questions *that have a
  saved image from that source and attack* which the image flips (the source saved images only for its own C).
  The diagonal (source = target) is the white-box ASR.
* Black-box R+ of a target: R+ exactly as for a white-box model (same union numerator, the target's C as
  denominator, the same question bootstrap), over the attacks that need no gradients of the target: its direct
  rendered-text attacks and every pixel attack transferred from the *other* models (its own images excluded, and
  a surrogate ensemble's wherever the target is one of its members); also apart by kind of transferred image:
  output-loss images (another model's white-box attacks) and surrogate images (made to transfer).
* White-box R+ beside it where the target was audited white-box in the run.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from mmaudit.pathways import registry
from mmaudit.report.risk import flags_by_fingerprint, wanted
from mmaudit.report.tables import Table, ci
from mmaudit.stats import ModelFlags, bootstrap_level_ci, union
from mmaudit.store import RunStore


def cell_name(source: str, attack: str) -> str:
    return f"{source} · {registry.display(attack)}"


def transfer_summary(store: RunStore, attack_params: dict[str, dict] | None, n_boot: int, seed: int,
                     examples: int = 6) -> dict | None:
    """The matrix, the black-box R+ per target, and a few transferred images that flipped a target; None when
    the run has no transfer records."""
    # a model's own perturbations through its pipeline are the channel table's non-adaptive column
    recs = [r for r in store.records("transfer") if wanted(r, attack_params) and not r.get("error")
            and not r.get("non_adaptive")]
    if not recs:
        return None
    flags = flags_by_fingerprint(store, attack_params)
    failed: dict[str, int] = defaultdict(int)  # a black-box target's clean requests that got no reply
    for r in store.records("clean"):
        failed[r["fingerprint"]] += bool(r.get("failed"))
    ran = {(r["fingerprint"], r["attack"]) for r in store.records("attack") if wanted(r, attack_params)}
    cells: dict[tuple[str, str, str], dict[str, bool]] = defaultdict(dict)
    names: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for r in recs:
        cells[(r["source_fingerprint"], r["attack"], r["fingerprint"])][r["sample"]] = r["flipped"]
        names[r["source_fingerprint"]] = r["source"]
        members[r["source_fingerprint"]] = r.get("source_members") or [r["source_fingerprint"]]
    matrix = []
    order = lambda kv: (names[kv[0][0]], registry.table_rank(kv[0][1]), flags[kv[0][2]].level,  # noqa: E731
                        flags[kv[0][2]].model)
    for (src, attack, tgt), flips in sorted(cells.items(), key=order):
        m = flags[tgt]
        has = np.array([q in flips for q in m.questions])
        cell = ModelFlags(m.model, m.level, m.questions, m.correct & has,
                          {"t": np.array([flips.get(q, False) for q in m.questions])})
        matrix.append({"source": names[src], "source_fingerprint": src, "attack": attack, "target": m.model,
                       "target_fingerprint": tgt, "n": int(cell.correct.sum()), "flips": int(cell.flipped["t"].sum()),
                       "asr": list(bootstrap_level_ci([cell], lambda x: x.flipped["t"], n_boot, seed)),
                       "diagonal": src == tgt, "from_target": tgt in members[src],
                       "kind": "surrogate" if registry.known(attack) and registry.spec(attack).transfer_only
                       else "output-loss"})
    targets = []
    for tgt in sorted({c["target_fingerprint"] for c in matrix}, key=lambda f: (flags[f].level, flags[f].model)):
        m = flags[tgt]
        direct = {a: f for a, f in m.flipped.items() if registry.is_text(a) and a not in m.not_run}
        moved = {f"{c['source_fingerprint']}:{c['attack']}": c for c in matrix
                 if c["target_fingerprint"] == tgt and not c["from_target"]}
        got = {k: np.array([cells[(c["source_fingerprint"], c["attack"], tgt)].get(q, False) for q in m.questions])
               for k, c in moved.items()}
        bb = ModelFlags(m.model, m.level, m.questions, m.correct, direct | got)
        by_kind = {kind: list(direct) + [k for k, c in moved.items() if c["kind"] == kind]
                   for kind in ("output-loss", "surrogate")}
        row = {"target": m.model, "fingerprint": tgt, "level": m.level, "n_correct": int(m.correct.sum()),
               "clean_failed": failed[tgt], "text_direct": list(_ci(bb, list(direct), n_boot, seed)),
               "r_plus_black_box": list(_ci(bb, list(bb.flipped), n_boot, seed)), "transferred_from": len(got),
               "r_plus_output_loss": list(_ci(bb, by_kind["output-loss"], n_boot, seed)),
               "r_plus_surrogate": (list(_ci(bb, by_kind["surrogate"], n_boot, seed))
                                    if len(by_kind["surrogate"]) > len(direct) else None),
               "r_plus_white_box": None}
        if any((tgt, a) in ran for a in m.flipped if not registry.is_text(a)):  # audited white-box in this run
            row["r_plus_white_box"] = list(_ci(m, list(m.flipped), n_boot, seed))
        targets.append(row)
    made = (attack_params or {}).get("surrogate")
    return {"matrix": matrix, "targets": targets, "examples": _examples(store, recs, examples),
            "surrogate_setting": surrogate_setting(made[0] if isinstance(made, list) else made)}


def surrogate_setting(params: dict | None) -> str | None:
    """How the surrogate images were made, in words (None when none were)."""
    if not params:
        return None
    loss = params.get("loss", "match")  # crafted before the loss was a choice: M-Attack's
    target = f"the {registry.display(params['target']['name'])} image" if "target" in params else ""
    aim = {"match": f"toward {target}", "away": "away from the clean image",
           "contrast": f"toward {target}, away from the clean image"}[loss]
    crops, features = params["crop_scale"], params.get("features", "pooled")
    return ", ".join([f"{loss} ({aim})", {"tokens": "token features", "pooled": "pooled embeddings"}[features],
                      "whole images" if min(crops) == 1 else f"local crops of {crops[0]:g}-{crops[1]:g} of the area",
                      f"eps {params['eps'] * 255:.0f}/255", f"{params['steps']} steps"])


def _ci(m: ModelFlags, attacks: list[str], n_boot: int, seed: int) -> tuple[float, float, float]:
    return bootstrap_level_ci([m], lambda x: union(x, attacks), n_boot, seed)


def _examples(store: RunStore, recs: list[dict], n: int) -> list[dict]:
    """Transferred images that flipped their target (another model's), distinct samples first."""
    clean = {(r["fingerprint"], r["sample"]): r for r in store.records("clean")}
    flips = sorted((r for r in recs if r["flipped"] and r["source_fingerprint"] != r["fingerprint"]),
                   key=lambda r: (r["sample"], r["model"], r["source"], r["attack"]))
    first: dict[str, dict] = {}
    for r in flips:
        first.setdefault(r["sample"], r)
    chosen = (list(first.values()) + [r for r in flips if first[r["sample"]] is not r])[:n]
    out = []
    for r in chosen:
        c = clean.get((r["fingerprint"], r["sample"]), {})
        out.append({"source": r["source"], "attack": r["attack"], "target": r["model"], "sample": r["sample"],
                    "question": r.get("question", ""), "reference": r["reference"], "clean_answer": c.get("answer", ""),
                    "clean_image": c.get("image"), "attacked_image": r["image"], "attacked_answer": r["answer"],
                    "eps": r["params"].get("eps")})
    return out


def transfer_tables(summary: dict) -> list[Table]:
    """The matrix (rows: source · attack; columns: targets; the diagonal marked) and the black-box R+ per target."""
    t = summary.get("transfer")
    if not t:
        return []
    targets = [r["target"] for r in t["targets"]]
    by_row: dict[str, dict[str, dict]] = defaultdict(dict)
    for c in t["matrix"]:
        by_row[cell_name(c["source"], c["attack"])][c["target"]] = c
    def mark(c: dict) -> str:
        return " (white-box)" if c["diagonal"] else " (made from it)" if c["from_target"] else ""

    rows = [[name] + [(ci(c["asr"]) + f" n={c['n']}" + mark(c)) if c else "—"
                      for c in (cells.get(x) for x in targets)] for name, cells in by_row.items()]
    matrix = ("Transfer ASR: % of the target's clean-correct questions with a saved image that the image flips, "
              "95% CI (rows: source model · attack; the diagonal is white-box)", ["source · attack", *targets], rows)
    surrogate = any(r.get("r_plus_surrogate") for r in t["targets"])
    risk = ("Black-box residual risk per target: R+ over its direct rendered-text attacks and every pixel attack "
            "transferred from the other models (% of C, 95% CI)" + ("; apart: with the output-loss images of "
                                                                     "the others' white-box attacks, with the "
                                                                     f"surrogate images ({t['surrogate_setting']})"
                                                                     if surrogate else ""),
            ["target", "level", "|C|", "clean requests failed", "text attacks alone", "black-box R+",
             *(["… output-loss images", "… surrogate images"] if surrogate else []), "sources × attacks",
             "white-box R+"],
            [[r["target"], r["level"], str(r["n_correct"]), str(r["clean_failed"]), ci(r["text_direct"]),
              ci(r["r_plus_black_box"]),
              *([ci(r["r_plus_output_loss"]), ci(r["r_plus_surrogate"]) if r.get("r_plus_surrogate") else "—"]
                if surrogate else []),
              str(r["transferred_from"]),
              ci(r["r_plus_white_box"]) if r["r_plus_white_box"] else "not audited white-box"]
             for r in t["targets"]])
    return [matrix, risk]
