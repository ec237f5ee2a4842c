"""`mmaudit zoo train` end to end: train, evaluate on the held-out set, write weights + card."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from mmaudit.data.synthetic import ALL_FAMILIES, synthetic_set
from mmaudit.models.zoo.adapter import ZooAdapter, save_zoo
from mmaudit.models.zoo.evaluate import accuracy_by_family
from mmaudit.models.zoo.train import Recipe, train_level

VAL_SEED = 5_000  # model selection / progress; the test seed (10_000) is never looked at in training
TEST_SEED = 10_000


def run_recipe(recipe: Recipe, out_dir: Path, workdir: Path, n_test: int = 200, log=print) -> dict:
    val = synthetic_set(40, seed=VAL_SEED)
    t0 = time.time()
    model = train_level(
        recipe, workdir, log=log, eval_fn=lambda m: accuracy_by_family(ZooAdapter(m, freeze=False), val)
    )
    seconds = getattr(model, "train_seconds", time.time() - t0)
    test = synthetic_set(n_test, seed=TEST_SEED)
    acc = accuracy_by_family(ZooAdapter(model, freeze=False), test)
    card = {
        "name": f"zoo-{recipe.level}",
        "level": recipe.level,
        "parameters": sum(p.numel() for p in model.parameters()),
        "data": {
            "generator": "mmaudit.data.synthetic",
            "families": list(ALL_FAMILIES),
            "n_per_family": recipe.n_per_family,
            "train_seed": recipe.seed,
            "distractor_banner": recipe.distractor_banner,
            "test_seed": TEST_SEED,
            "n_test_per_family": n_test,
        },
        "seed": recipe.seed,
        "recipe": asdict(recipe),
        "accuracy": acc,
        "train_seconds": round(seconds, 1),
        "trained_on": f"{platform.machine()} CPU, {recipe.threads} threads, torch {torch.__version__}",
    }
    save_zoo(model, out_dir, card)
    log(f"{recipe.level}: accuracy {acc} in {seconds / 60:.1f} min -> {out_dir}")
    return card
