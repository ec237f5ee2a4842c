"""mmaudit from Python: load or wrap a model, attack tensors, run an audit, open a finished run.

The command line is a thin layer over the same functions (:func:`audit` runs what `mmaudit audit` runs, with the
same options by name), so a run made here is a run folder like any other: `mmaudit report RUN` rebuilds its
report, and :func:`open_run` reads a folder the command line made.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmaudit.data.sample import Sample
from mmaudit.errors import UsageError
from mmaudit.judge.match import Judge
from mmaudit.pathways import registry


def load_model(spec: str, *, device: str = "auto", dtype: str = "auto", device_map: str | None = None,
               max_pixels: int | None = None, activation_checkpointing: str = "auto"):
    """A model by the command line's ``--model`` spec ('zoo:L2', 'Qwen2.5-VL-3B', a checkpoint folder[@L1/@L2/@L3],
    'endpoint:MODEL@URL'), placed as ``--device`` / ``--dtype`` would place it."""
    from mmaudit.models.load import Placement
    from mmaudit.models.load import load_model as load

    return load(spec, Placement(device=device, dtype=dtype, device_map=device_map, max_pixels=max_pixels,
                                activation_checkpointing=activation_checkpointing))


def wrap_hf(model, processor=None, **kwargs):
    """A transformers VLM object you hold, in its family's adapter; its ``training`` flag and ``requires_grad``
    stay yours (see :func:`mmaudit.models.hf.wrap.wrap_hf`)."""
    from mmaudit.models.hf.wrap import wrap_hf as wrap

    return wrap(model, processor, **kwargs)


# --------------------------------------------------------------------------- attacks on tensors


class TensorAttack:
    """A registered pixel attack bound to a model, called torchattacks-style on a batch of images::

        atk = mmaudit.EndPGD(vlm, eps=8/255, steps=40)
        adv = atk(images, questions, answers)   # (B, 3, H, W) in [0, 1], what an 8-bit PNG holds

    ``params`` are the attack's own fields (checked as ``--attack`` checks them). After a call, ``result`` holds the
    per-sample outcome (``flipped``, ``answers``, ``passes``); a flip is the judge's verdict on the model's answer to
    the quantised image. Attacks that aim at a wrong answer (MANTIS, End-PGD's margin loss) take ``wrong``.
    """

    attack_name = ""

    def __init__(self, vlm, attack: str | None = None, *, judge: Judge | None = None, **params: Any) -> None:
        from mmaudit.pathways.attack_options import checked

        name = attack or self.attack_name
        if not registry.is_pixel(name):
            raise UsageError(f"{name!r} is not a registered pixel attack (pixel attacks: "
                             f"{', '.join(registry.names('pixel'))})")
        self.vlm, self.name, self.judge = vlm, name, judge or Judge()
        self.attack = registry.spec(name).cls(judge=self.judge, **checked(name, params))
        self.result = None

    def __call__(self, images: torch.Tensor | Sequence[torch.Tensor], questions: Sequence[str],
                 answers: Sequence[str], *, wrong: Sequence[str] | None = None, answer_type: str = "free text",
                 task_family: str = "custom") -> torch.Tensor | list[torch.Tensor]:
        """Attack images (a (B, 3, H, W) tensor or a list of (3, H, W), values in [0, 1]) asked ``questions`` whose
        right answers are ``answers``; returns the adversarial images in the same form."""
        if not (len(images) == len(questions) == len(answers)):
            raise UsageError(f"{self.name}: {len(images)} images, {len(questions)} questions and {len(answers)} "
                             "answers: give one of each per sample")
        samples = []
        for i, (x, q, a) in enumerate(zip(images, questions, answers)):
            arr = (x.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
            meta = {"wrong_answer": wrong[i]} if wrong is not None else {}
            samples.append(Sample(f"tensor-{i}", np.ascontiguousarray(arr), q, a, answer_type, task_family,
                                  meta=meta).validate())
        self.result = self.attack(self.vlm, samples)
        adv = [torch.from_numpy(u).permute(2, 0, 1).float() / 255 for u in self.result.adv_uint8]
        return torch.stack(adv) if isinstance(images, torch.Tensor) else adv

    def on_samples(self, samples: list[Sample]):
        """The attack on :class:`~mmaudit.data.sample.Sample` objects (the audit's form): its full result."""
        self.result = self.attack(self.vlm, samples)
        return self.result


def _bound(name: str, cls_name: str) -> type[TensorAttack]:
    """A :class:`TensorAttack` class for one attack (the registry is read only when it is used, not on import)."""
    return type(cls_name, (TensorAttack,), {"attack_name": name, "__doc__": f"{cls_name} on tensors "
                                            f"(:class:`TensorAttack` bound to the registered attack {name!r})."})


EndPGD = _bound("end_pgd", "EndPGD")
VisPGD = _bound("vis_pgd", "VisPGD")
MANTIS = _bound("mantis", "MANTIS")


def attack(name: str, vlm, **params: Any) -> TensorAttack:
    """Any registered pixel attack (a plugin's too) by name, bound to ``vlm``."""
    return TensorAttack(vlm, name, **params)


# --------------------------------------------------------------------------- audits and their results


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% percentile-bootstrap interval (None where undefined, e.g. an empty set)."""

    value: float | None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, triple) -> Estimate:
        return cls(*(list(triple) + [None, None, None])[:3]) if triple is not None else cls(None)

    def __str__(self) -> str:
        if self.value is None:
            return "n/a"
        return f"{100 * self.value:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"


@dataclass(frozen=True)
class LevelResult:
    """One fusion level: the macro average over its models, each with its CI."""

    level: str
    n_models: int
    r0: Estimate
    r_plus: Estimate
    gap: Estimate  # R+ - R0
    asr: dict[str, Estimate]
    delta: dict[str, Estimate]


@dataclass(frozen=True)
class ModelResult:
    """One model: its clean-correct set and per-attack ASR, R0, R+ and each enhanced attack's exclusive flips."""

    model: str
    level: str
    n: int
    n_correct: int
    clean_acc: float
    asr: dict[str, float]
    r0: float | None
    r_plus: float | None
    delta: dict[str, float]
    gap: float | None


@dataclass
class AuditResult:
    """A finished audit, read from its run folder (what `mmaudit report` reads)."""

    folder: Path
    models: list[ModelResult]
    levels: dict[str, LevelResult]
    headline: list[str]
    warnings: list[str]
    summary: dict = field(repr=False)

    @classmethod
    def open(cls, folder: str | Path) -> AuditResult:
        from mmaudit.report import all_warnings
        from mmaudit.report.build import audit_summary

        folder = Path(folder)
        summary = audit_summary(folder)[0]
        models = [ModelResult(m["model"], m["level"], m["n"], m["n_correct"], m["clean_acc"], m["asr"],
                              _number(m["r0"]), _number(m["r_plus"]), m.get("delta", {}), _number(m.get("gap")))
                  for m in summary["models"]]
        levels = {}
        for level, row in summary["levels"].items():
            pick = {prefix: {k[len(prefix):]: Estimate.of(v) for k, v in row.items() if k.startswith(prefix)}
                    for prefix in ("asr_", "delta_")}
            levels[level] = LevelResult(level, row["n_models"], Estimate.of(row.get("r0")),
                                        Estimate.of(row.get("r_plus")), Estimate.of(row.get("gap")), pick["asr_"],
                                        pick["delta_"])
        return cls(folder, models, levels, list(summary["headline"]["sentences"]),
                   all_warnings(summary),
                   summary)

    def records(self, kind: str | None = "attack") -> list[dict]:
        """The run's per-sample records of one kind ('clean', 'attack', 'recovery', ...; None: every kind)."""
        from mmaudit.store import RunStore

        store = RunStore(self.folder / "results.jsonl")
        return list(store.records(kind) if kind else store.records())

    def to_pandas(self, kind: str | None = "attack"):
        """:meth:`records` as a pandas DataFrame, one row per record (``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError:
            raise UsageError("to_pandas needs pandas: pip install pandas") from None
        return pd.DataFrame(self.records(kind))


def _number(value) -> float | None:
    """A statistic as a number, or None where it is undefined (the summary's NaN: no enhanced attack ran)."""
    return None if value is None or value != value else float(value)


def open_run(folder: str | Path) -> AuditResult:
    """A finished run folder (made here or by `mmaudit audit`) as an :class:`AuditResult`."""
    return AuditResult.open(folder)


def audit(models: Any, data: str | Sequence[Sample] = "synthetic:8", *, out: str | Path | None = None,
          attacks: str | Sequence[str] | None = None, attack_options: dict[str, dict] | None = None,
          verbose: bool = False, **options: Any) -> AuditResult:
    """Run FusionAudit and return its result.

    ``models``: a spec or list of specs (as ``--model``), or model objects (from :func:`load_model`,
    :func:`wrap_hf`, or your own :class:`~mmaudit.models.vlm.VLM`); specs or objects, not both.
    ``data``: a ``--data`` spec, or a list of :class:`~mmaudit.data.sample.Sample`. ``out``: the run folder
    (default: a new temporary folder; an existing one resumes). ``attacks``: names (default the paper's five);
    ``attack_options``: an attack's own fields by name, ``{"end_pgd": {"loss": "margin"}}``; ``options``: any
    other option of `mmaudit audit` by its Python name (``eps="8/255"``, ``steps=40``, ``strength="strong"``,
    ``recovery=0``, ``n_boot=1000``, ``plugin=["my_module"]``, ...). ``verbose`` prints the tables."""
    from mmaudit.cli.audit import run_audit_command
    from mmaudit.cli.options import AuditOptions

    held = None
    given = [models] if isinstance(models, str) or not isinstance(models, Sequence) else list(models)
    if all(isinstance(m, str) for m in given):
        options["model"] = given
    elif any(isinstance(m, str) for m in given):
        raise UsageError("audit(models=...): give model specs or model objects, not both")
    else:
        held = given
    samples = None if isinstance(data, str) else list(data)
    if isinstance(data, str):
        options["data"] = data
    if attacks is not None:
        options["attacks"] = attacks if isinstance(attacks, str) else ",".join(attacks)
    for name, opts in (attack_options or {}).items():
        options.setdefault("attack", []).append(f"{name}:" + ",".join(f"{k}={_spelt(v)}" for k, v in opts.items()))
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="mmaudit-run-"))
    run_audit_command(AuditOptions(out=folder, **options), models=held, samples=samples, quiet=not verbose)
    return AuditResult.open(folder)


def _spelt(value: Any) -> str:
    """A Python value as ``--attack`` writes it (tuples with ``+``)."""
    if isinstance(value, (tuple, list)):
        return "+".join(str(v) for v in value)
    return str(value)


# --------------------------------------------------------------------------- QIMG-7 and SATR


def build_qimg7(out: str | Path, questions: str | Path | list | None = None, *, seed: int = 0,
                patch_steps: int = 60, style_steps: int = 80, **build: Any) -> dict:
    """Build a QIMG-7 benchmark (16 regimes per question) into ``out``, as `mmaudit bench build` does, from
    ``questions``: a JSONL of questions with clean evidence, items already read, or None (the bundled mini set).
    ``build``: any other :class:`~mmaudit.rag.construct.benchmark.BuildConfig` field. Returns the build summary."""
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.inputs import read_questions
    from mmaudit.rag.construct.mini import mini_inputs

    if questions is None:
        items = mini_inputs()
    elif isinstance(questions, (str, Path)):
        items = read_questions(Path(questions))
    else:
        items = list(questions)
    cfg = BuildConfig(seed=seed, patch_steps=patch_steps, style_steps=style_steps, **build)
    return build_benchmark(items, Path(out), cfg)


def run_satr(benchmark: str | Path, chat: Any = "embedded", out: str | Path | None = None, *, judge: Any = None,
             **config: Any) -> list[dict]:
    """Every registered SATR method (:mod:`mmaudit.rag.evaluate.methods`, plugins' too) on a QIMG-7 folder, as
    `mmaudit bench run` does; returns the main table (one row per method: TC, TP, Drop, Balanced).

    ``chat``: 'embedded' (the offline SmolLM2), 'MODEL@URL' (an OpenAI-compatible endpoint), or any object with
    ``chat(messages) -> str``; ``judge`` likewise (default: ``chat``); ``config``: any
    :class:`~mmaudit.rag.evaluate.config.BenchConfig` field (``stack`` names the run's folder)."""
    from mmaudit.cli.bench import chat_model
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.rag.evaluate.run import run_bench
    from mmaudit.rag.evaluate.score import main_table

    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="mmaudit-satr-"))
    model = chat_model(chat, folder / "cache") if isinstance(chat, str) else chat
    graded = (chat_model(judge, folder / "cache") if isinstance(judge, str) else judge) or model
    cfg = BenchConfig(**config)
    run_bench(Path(benchmark), model, folder, graded, cfg)
    return main_table(folder, cfg.stack)
