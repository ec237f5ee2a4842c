"""Is this evaluation valid? Clean accuracy per model and dataset, checked against what the model should score.

Every audit number is conditioned on the clean-correct set; when an adapter shows a
checkpoint another prompt, template, preprocessing or precision than its own pipeline
would, clean accuracy collapses and with it C, R0, R+ and every diagnostic. As
AutoAttack warns when an evaluation cannot be valid, the summary flags a dataset whose
clean accuracy falls below half of the model's published figure (when the registry
holds one) or below a floor for the dataset otherwise, and names the likely causes.
"""

from __future__ import annotations

from collections import defaultdict

from mmaudit.data import datasets
from mmaudit.store import RunStore

PUBLISHED_RATIO = 0.5  # below half the published figure counts as far below
CAUSES = ("the prompt (a missing answer-format instruction, see --prompt-suffix)",
          "the chat template or start token", "image preprocessing (size, resampling, normalisation)",
          "the precision (try --dtype float32)")


def instruction_of(record: dict) -> str:
    """The instruction a clean record's question was asked with ('' for the bare question)."""
    prompt = record.get("prompt")
    return prompt[len(record["question"]) + 1 :] if prompt else ""


def threshold(model: str, dataset: str) -> tuple[float, str]:
    """(the accuracy below which a warning is raised, where it comes from)."""
    from mmaudit.models.hf.registry import lookup

    entry = lookup(model)
    published = dict(entry.published) if entry is not None else {}
    if dataset in published:
        figure, source = published[dataset]
        return PUBLISHED_RATIO * figure, f"half the published {100 * figure:.1f}% ({source})"
    floor = datasets.floor(dataset)  # the dataset's declared floor (mmaudit.data.datasets)
    return floor, f"the {dataset} floor of {100 * floor:.0f}%"


def clean_validity(store: RunStore) -> dict:
    """Per model and dataset: clean accuracy, |C|, the instruction in force, the threshold and any warning."""
    rows: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in store.records("clean"):
        rows[(r["model"], r["level"], r["family"])].append(r)
    table, warnings = [], []
    blind = {r["model"]: r["canary"]["reason"] for r in store.records("endpoint_check")
             if r.get("canary") and not r["canary"]["read"]}
    for (model, level, dataset), recs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        acc = sum(bool(r["correct"]) for r in recs) / len(recs)
        bar, why = threshold(model, dataset)
        instructions = sorted({instruction_of(r) for r in recs})
        row = {"model": model, "level": level, "dataset": dataset, "n": len(recs),
               "correct": sum(bool(r["correct"]) for r in recs), "accuracy": acc, "threshold": bar,
               "threshold_source": why, "instruction": " | ".join(instructions), "valid": acc >= bar}
        table.append(row)
        causes = [f"the endpoint did not read the canary image ({blind[model]})"] if model in blind else CAUSES
        if acc < bar:
            warnings.append(f"{model} on {dataset}: clean accuracy {100 * acc:.1f}% ({row['correct']}/{len(recs)}) "
                            f"is below {why}; the audit of this dataset is conditioned on very few questions. "
                            f"{'Cause' if model in blind else 'Likely causes'}: {'; '.join(causes)}.")
    prompts = {r["dataset"]: r["instruction"] for r in table}
    return {"clean": table, "warnings": warnings, "prompts": prompts}
