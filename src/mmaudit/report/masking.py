"""Gradient masking: questions only the gradient-free member flipped (AutoAttack's check).

Under ``--strength strong`` every pixel attack ends with Square, a random search that reads the loss but never
its gradient. A question Square flips after every gradient attack of the run (every gradient member of every
pixel attack) left it says the gradients misled the attacks there, not that the model resisted them: R+ rests on
gradients that may be masked and is a weaker bound than it looks. The records say which member flipped each
question (``member``), so the check needs nothing but the store.
"""

from __future__ import annotations

from collections import defaultdict

from mmaudit.pathways import registry
from mmaudit.report.risk import wanted
from mmaudit.store import RunStore


def is_gradient_free(member: str) -> bool:
    return member.partition(":")[0] == "square"


def masking_check(store: RunStore, attack_params: dict | None) -> dict:
    """Per model, the questions a gradient-free member flipped that no gradient member of any pixel attack did;
    one warning line per model with any."""
    flips: dict[tuple[str, str], dict[str, set]] = defaultdict(lambda: defaultdict(set))
    ran: set[str] = set()
    for r in store.records("attack"):
        if "member" not in r or not registry.is_pixel(r["attack"]) or not wanted(r, attack_params):
            continue
        ran.add(r["model"])
        if r["flipped"]:
            kind = "free" if is_gradient_free(r["member"]) else "gradient"
            flips[(r["model"], r["level"])][kind].add(r["sample"])
    models = []
    for (model, level), f in sorted(flips.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        only = sorted(f["free"] - f["gradient"])
        models.append({"model": model, "level": level, "square_only": len(only), "samples": only,
                       "gradient": len(f["gradient"])})
    warnings = [f"{m['model']}: Square (gradient-free) flipped {m['square_only']} question"
                f"{'s' if m['square_only'] > 1 else ''} that every gradient attack left ({', '.join(m['samples'][:5])}"
                f"{', ...' if m['square_only'] > 5 else ''}): the gradients may be masked, and R+ is then a weaker "
                "bound than it looks" for m in models if m["square_only"]]
    return {"checked": sorted(ran), "models": models, "warnings": warnings} if ran else {}


def member_table(store: RunStore, attack_params: dict | None) -> list[dict]:
    """Per model, attack and member (in the ensemble's order): the questions it reached (those the earlier members
    left), how many it flipped, and its mean passes per question reached."""
    rows: dict[tuple, dict] = {}
    for r in store.records("attack"):
        if "member" not in r or not wanted(r, attack_params):
            continue
        for m, passes in r["member_passes"].items():
            row = rows.setdefault((r["level"], r["model"], r["attack"], m),
                                  {"model": r["model"], "level": r["level"], "attack": r["attack"], "member": m,
                                   "reached": 0, "flipped": 0, "passes": 0})
            row["reached"] += 1
            row["passes"] += passes
            row["flipped"] += bool(r["flipped"]) and m == r["member"]
    order = {a: list(p.get("members", ())) for a, p in (attack_params or {}).items() if isinstance(p, dict)}
    out = sorted(rows.values(), key=lambda x: (x["level"], x["model"], x["attack"],
                                               order.get(x["attack"], []).index(x["member"])
                                               if x["member"] in order.get(x["attack"], []) else 99))
    for row in out:
        row["passes"] /= row["reached"]
    return out
