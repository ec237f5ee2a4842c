"""Every option of `mmaudit audit`, `audit transfer` and `audit sweep`, defined once, and the Typer commands built
from them.

Each option is a pydantic field with its default and its help; the commands are built from these models
(:func:`command_from`), the run record keeps ``model_dump()``, and `audit transfer` rebuilds an audit's plan by
validating the run record back into :class:`AuditOptions` (a record from before an option existed takes the
option's default; one from after an option was removed drops it). :meth:`AuditOptions.audit_config` turns the
options into the :class:`~mmaudit.audit.config.AuditConfig` the plan and every record key derive from.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from mmaudit.cli.common import parse_eps, parse_list, parse_price
from mmaudit.errors import UsageError


def option(default: Any, help: str, *names: str, flag: bool = False) -> Any:
    """A command-line option: its default, its help, its spellings (default ``--field-name``), and whether it is a
    switch (present means on)."""
    return Field(default, description=help, json_schema_extra={"names": list(names), "flag": flag})


class Options(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


class PluginOptions(Options):
    """Modules that register attacks, model families or datasets (:mod:`mmaudit.plugins`), imported by each command
    first (:meth:`load_plugins`): the run record keeps them, so `audit transfer` and Ray actors import them too."""

    plugin: list[str] = option([], "A module to import first that registers attacks, model families or datasets "
                               "(repeat for more); installed plugins are found by their entry points without it.",
                               "--plugin")

    def load_plugins(self) -> None:
        """Import the ``--plugin`` modules (before any attack or model is looked up)."""
        from mmaudit import plugins

        plugins.use(*self.plugin)


class PlacementOptions(Options):
    """Where a model runs: the same options for `audit`, `audit transfer` and `audit sweep` (and through them,
    every Ray actor)."""

    device: str = option("auto", "auto (the GPU when there is one, else the CPU), cpu, cuda or cuda:N.")
    dtype: str = option("auto", "auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16 or float16. The "
                        "attack's perturbation stays float32 in pixel space; records of different precisions never "
                        "mix.")
    device_map: str | None = option(None, "A transformers device map for a model larger than one card, e.g. auto.")
    max_pixels: int | None = option(None, "Qwen family: the processor's pixel budget per image (sets its token "
                                    "count, hence memory); default the checkpoint's.")
    activation_checkpointing: str = option(
        "auto", "Activation checkpointing in attacks: auto (mlp+norms on a GPU, none on CPU), none, mlp (recompute "
        "the MLP blocks), mlp+norms (and the normalisations) or layers (recompute every layer).",
        "--activation-checkpointing")
    checkpoint: str | None = option(None, "Deprecated: --activation-checkpointing ('checkpoint' names a weights "
                                    "folder).", "--checkpoint")
    batch: str = option("auto", "Samples per batch: a number, or auto (64 to start with on a GPU, halved when "
                        "memory runs out and the size that fits remembered; 32 on CPU).")

    def placement(self):
        from mmaudit.models.load import Placement

        return Placement(device=self.device, dtype=self.dtype, device_map=self.device_map,
                         max_pixels=self.max_pixels, activation_checkpointing=self.activation_checkpointing)

    def model_post_init(self, context: Any) -> None:
        """The deprecated ``--checkpoint`` read once, as the options are: its value moves to its new name."""
        if self.checkpoint is not None:
            from mmaudit.cli.common import console

            console.print(f"[yellow]--checkpoint is deprecated: use --activation-checkpointing {self.checkpoint}"
                          "[/yellow]")
            self.activation_checkpointing, self.checkpoint = self.checkpoint, None


class EndpointOptions(Options):
    """An endpoint target's chat client (`--model endpoint:MODEL@URL`): the same options for `audit` and
    `audit transfer`."""

    price: str | None = option(None, "Endpoint targets: PROMPT,COMPLETION price per 1k tokens (for --budget and the "
                               "run record).")
    budget: float | None = option(None, "Endpoint targets: stop starting requests once the cost reaches this (exit "
                                  "3; finished requests are cached, a rerun resumes).")
    concurrency: int = option(8, "Endpoint targets: requests in flight.")
    max_tokens: int | None = option(None, "Endpoint targets: the reply's token limit (default: the audit's answer "
                                    "length, 16, as for every model).")
    no_canary: bool = option(False, "Endpoint targets: skip the image canary (an image with a random 4-digit "
                             "number the endpoint is asked to read before the work).", "--no-canary", flag=True)

    def endpoint_settings(self) -> dict:
        """The chat client's settings for endpoint targets."""
        return {"price_per_1k": parse_price(self.price), "budget": self.budget, "concurrency": self.concurrency,
                "max_tokens": self.max_tokens, "canary": not self.no_canary}


MODEL_HELP = ("'zoo', 'zoo:L2', one of the paper's models by short name ('Qwen2.5-VL-3B'), a hub id "
              "('Qwen/Qwen2.5-VL-3B-Instruct') or a local checkpoint folder (audited at its model type's fusion level; "
              "append @L1/@L2/@L3 to set another); or 'endpoint:MODEL@URL', a deployed VLM behind an "
              "OpenAI-compatible endpoint (black-box: the rendered-text pathway and RUG).")
PROMPT_SUFFIX_HELP = ("The instruction every question is asked with, on a line after it (default: each dataset's "
                      "own: ChartQA and DocVQA 'Answer the question using a single word or phrase.', MME none, a "
                      "JSONL row's 'instruction'); '' asks the bare question. Part of every record's key.")


class PipelineOptions(Options):
    """What stands between the attacker's image and the model: a delivery channel, then a defence."""

    channel: str | None = option(None, "What transport does to every image before the model sees it, e.g. jpeg:75, "
                                 "resize:0.5, jpeg:85+resize:1024 (a registered transform, '+' to compose). Part of "
                                 "the model: its name, fingerprint and every record's key. Attacks are adaptive: "
                                 "the model always sees the real transform's output, gradients flow through a "
                                 "differentiable stand-in (straight through where there is none). For `audit "
                                 "transfer`: every target is shown each image through it (what an API does to "
                                 "uploads), and surrogate images are crafted through it.")
    defence: str | None = option(None, "What the deployment adds after the channel, e.g. bitdepth:5, median:3, "
                                 "blur:1.0, random-resize-pad:0.9-1.1; as --channel.")

    def pipeline(self):
        """The channel and defence (None without either); a bad spec fails here, before any model loads."""
        from mmaudit.models.transforms import Pipeline

        return Pipeline.of(self.channel, self.defence)


class AuditOptions(PluginOptions, PlacementOptions, EndpointOptions, PipelineOptions):
    """`mmaudit audit`."""

    model: list[str] = option(["zoo"], MODEL_HELP)
    data: str = option("synthetic", "'synthetic[:N]', a JSONL of samples, or 'chartqa:FILE.json,docvqa:FILE.json,"
                       "mme:DIR'.")
    select: int | None = option(None, "A balanced seeded draw of N questions over the data sources (paper: 1500).")
    attacks: str = option("vis_pgd,end_pgd,mantis,typo_evid,nat_evid", "Comma-separated attacks of both pathways "
                          "(any registered attack; default the paper's five).")
    eps: str = option("8/255", "L-infinity radius in [0, 1] pixel units, e.g. 8/255.")
    strength: str = option("paper", "How hard the pixel attacks try: fast (PGD, 10 steps), paper (PGD, 40 steps: "
                           "the paper's protocol), strong (AutoAttack's composition: each pixel attack's objectives "
                           "in turn with APGD, 100 steps each, on what earlier ones left, then the gradient-free "
                           "Square attack; it warns when Square flips what every gradient attack left). --steps, "
                           "--optimiser and --restarts override it.")
    steps: int | None = option(None, "Steps (model passes) per sample and restart (default: the strength's).")
    optimiser: str | None = option(None, "pgd (signed steps of --alpha) or apgd (Croce & Hein's step-size "
                                   "schedule with momentum; --alpha unused); default: the strength's.")
    restarts: int | None = option(None, "Runs per sample of each pixel attack, the worst case kept (later runs from "
                                  "random starts, only on what earlier ones left); default: the strength's.")
    attack: list[str] = option([], "An attack's own parameters, NAME:FIELD=VALUE[,FIELD=VALUE] (repeat per attack), "
                               "e.g. end_pgd:loss=margin,steps=100; any field of the attack's dataclass, checked "
                               "against it (tuples as 10+20+40). Applied after --eps/--steps/--strength.", "--attack")
    end_pgd_loss: str = option("ce", "Deprecated: use --attack end_pgd:loss=margin. End-PGD's objective: ce (the "
                               "paper's) or margin.")
    alpha: float | None = option(None, "PGD step size (default eps/8).")
    seed: int = option(0, "Random-start and bootstrap seed.")
    limit: int | None = option(None, "Audit only the first N samples.")
    paper_protocol: bool = option(False, "No early stopping: the full fixed budget.", "--paper-protocol", flag=True)
    downscale: int | None = option(None, "Memory fallback: optimise noise at this side length, then upsample.")
    n_boot: int = option(10_000, "Bootstrap replicates.")
    out: Path = option(Path("runs/audit"), "Run folder: results.jsonl (the store), adv/, report.md.")
    typo_position: str = option("bottom", "Typo-Evid's fixed region: bottom or top.")
    max_chars: int = option(16, "L: longest overlaid wrong answer, in characters.")
    editor: str = option("layout", "Nat-Evid editor: layout, http:URL or diffusers:MODEL.")
    oar_layers: str | None = option(None, "Decoder layers averaged for OAR, e.g. '2,3' (default: later half).")
    recovery: int = option(40, "Layer recovery on the first N End-PGD flips per model (0: off).")
    recovery_positions: str = option("image", "Positions patched in layer recovery: image or prompt.")
    ocr_limit: int = option(48, "Chart/document samples for the OCR evidence check (0: off).")
    executor: str = option("local", "local, or ray: (model x sample shard) units over Ray actors, one per GPU, "
                           "retried when a worker dies; results land in this run's store.")
    ray_workers: int = option(1, "Ray actors per model.")
    ray_address: str | None = option(None, "Ray cluster address (default $RAY_ADDRESS, else a local Ray).")
    schedule: str = option("full", "full: every attack on all of C; union: AutoAttack-style, each pixel attack only "
                           "on what earlier ones left (R0/R+/δ exact, fewer passes).")
    wrong_ocr: str = option("auto", "Wrong answers for text labels may come from the image's OCR text (images "
                            "without layout metadata): auto (if rapidocr is installed), on, off. Inspect them first "
                            "with `mmaudit data wrong`.")
    prompt_suffix: str | None = option(None, PROMPT_SUFFIX_HELP)
    reference: str = option("label", "label: flips are judged against the dataset's answer; self: against the "
                            "model's own clean answer (a label-free audit of your own images; C is every question "
                            "the model answered).")
    wait: bool = option(False, "When another process holds the run folder, wait for it instead of refusing.",
                        "--wait", flag=True)
    adaptive_only: bool = option(False, "With --channel or --defence, skip the bare model: by default each white-box "
                                 "model is also audited bare and its own perturbations are judged through the "
                                 "pipeline, so the report shows bare / non-adaptive / adaptive side by side.",
                                 "--adaptive-only", flag=True)
    eot: int | None = option(None, "Expectation over transformation: each attack step averages its loss over this "
                             "many draws of a random --defence (default 1; 20 under --strength strong, "
                             "AutoAttack's choice for randomised defences).")

    def audit_config(self):
        """What the plan and every record key derive from."""
        from mmaudit.audit.config import AuditConfig
        from mmaudit.pathways.text.runner import TextRunConfig

        text = TextRunConfig(oar_layers=tuple(parse_list(self.oar_layers, int)) if self.oar_layers else None)
        strength = self.resolved_strength()
        return AuditConfig(attacks=parse_list(self.attacks), eps=parse_eps(self.eps), steps=strength["steps"],
                           optimiser=strength["optimiser"], restarts=strength["restarts"], end_loss=self.end_pgd_loss,
                           ensemble=strength["ensemble"], eot=self.resolved_eot(),
                           alpha=self.alpha, seed=self.seed, batch=self.placement().batch(self.batch),
                           early_stop=not self.paper_protocol, downscale=self.downscale,
                           typo_position=self.typo_position, max_chars=self.max_chars, editor=make_editor(self.editor),
                           text=text, recovery=self.recovery, recovery_positions=self.recovery_positions,
                           ocr_limit=self.ocr_limit, schedule=self.schedule, reference=self.reference,
                           attack_options=self.attack_options())

    def attack_options(self) -> dict[str, dict[str, str]]:
        """``--attack`` specs by attack; each names an attack of this audit."""
        from mmaudit.pathways.attack_options import parse_spec

        out: dict[str, dict[str, str]] = {}
        for spec in self.attack:
            name, opts = parse_spec(spec)
            if name not in parse_list(self.attacks):
                raise UsageError(f"--attack {spec}: {name} is not among --attacks ({self.attacks})")
            out.setdefault(name, {}).update(opts)
        return out

    def resolved_eot(self) -> int:
        """Draws per step: --eot, else 20 under the strong preset when the pipeline draws at random, else 1."""
        if self.eot is not None:
            if self.eot < 1:
                raise UsageError(f"--eot {self.eot}: at least 1")
            return self.eot
        pipeline = self.pipeline()
        return STRONG_EOT if self.strength == "strong" and pipeline is not None and pipeline.random else 1

    def resolved_strength(self) -> dict:
        """The preset with what the options override: {preset, optimiser, steps, restarts}."""
        if self.strength not in STRENGTHS:
            raise UsageError(f"--strength {self.strength!r}: use one of {', '.join(STRENGTHS)}")
        given = {"optimiser": self.optimiser, "steps": self.steps, "restarts": self.restarts}
        return {"preset": self.strength} | STRENGTHS[self.strength] | {k: v for k, v in given.items() if v is not None}


# The pixel attacks' strength presets; "paper" is the default and reproduces every earlier figure.
# "strong" runs each pixel attack as AutoAttack composes it: its objectives in turn (APGD, 100 steps each), each on
# what the earlier ones left, then the gradient-free Square search (the attack class's STRONG members).
STRONG_EOT = 20  # AutoAttack's draws per step against a randomised defence
STRENGTHS = {"fast": {"optimiser": "pgd", "steps": 10, "restarts": 1, "ensemble": False},
             "paper": {"optimiser": "pgd", "steps": 40, "restarts": 1, "ensemble": False},
             "strong": {"optimiser": "apgd", "steps": 100, "restarts": 1, "ensemble": True}}


class TransferOptions(PluginOptions, PlacementOptions, EndpointOptions, PipelineOptions):
    """`mmaudit audit transfer`: the run's plan comes from its audit's run record; these say where targets run."""

    n_boot: int | None = option(None, "Bootstrap replicates (default: the audit's).")
    surrogates: str | None = option(None, "Also craft images made to transfer: a comma-separated surrogate ensemble "
                                    "of image encoders ('zoo:L2', any white-box --model spec: its vision tower, or "
                                    "a CLIP / SigLIP vision model such as openai/clip-vit-base-patch16), or "
                                    "leave-one-out (each of the run's models gets the ensemble of the others' "
                                    "towers). See --surrogate-loss; M-Attack's recipe is --surrogate-loss "
                                    "match --surrogate-features pooled --crop-scale 0.5,0.9.")
    surrogate_eps: str = option("16/255", "The surrogate images' L-infinity radius.")
    surrogate_steps: int = option(300, "Surrogate steps (signed steps of 1/255).")
    crop_scale: str = option("1,1", "Area fraction of the random local crop each surrogate step embeds (1,1: the "
                             "whole image; M-Attack's 0.5,0.9).")
    surrogate_target: str = option("typo_evid", "Whose image each question's surrogate perturbation is matched to: "
                                   "typo_evid (the wrong answer overlaid) or nat_evid (drawn as host content).")
    surrogate_loss: str = option("away", "What each surrogate step raises: match (cosine to the target image's "
                                 "embedding, M-Attack's), away (minus the cosine to the clean image's), contrast "
                                 "(the two together).")
    surrogate_features: str = option("tokens", "What the surrogates compare: pooled (one embedding per image, "
                                     "M-Attack's) or tokens (the encoder's token features, position by position).")
    wait: bool = AuditOptions.model_fields["wait"]


class SweepOptions(PluginOptions, PlacementOptions):
    """`mmaudit audit sweep`."""

    model: list[str] = option(["zoo"], "Models, as for `mmaudit audit`.")
    data: str = option("synthetic:16", "Samples (the paper uses 100 per dataset).")
    seeds: str = option("0,1,2", "Random-start seeds.")
    steps: str = option("10,20,30,40,50", "Step budgets.")
    eps: str = option("2/255,4/255,8/255", "Radii.")
    paper_protocol: bool = option(False, "No early stopping.", "--paper-protocol", flag=True)
    out: Path = option(Path("runs/sweep"), "Run folder (resumable store).")
    prompt_suffix: str | None = option(None, "As for `mmaudit audit`.")
    wait: bool = AuditOptions.model_fields["wait"]


def make_editor(spec: str):
    """'layout' (embedded), 'http:URL' (an image-edit endpoint) or 'diffusers:MODEL' (needs weights, a GPU)."""
    from mmaudit.pathways.text import LayoutEditor
    from mmaudit.pathways.text.generative import GenerativeEditor, diffusers_backend, http_backend

    if spec == "layout":
        return LayoutEditor()
    kind, _, target = spec.partition(":")
    if kind == "http" and target:
        return GenerativeEditor(http_backend(target), name=f"http:{target}")
    if kind == "diffusers" and target:
        return GenerativeEditor(diffusers_backend(target), name=f"diffusers:{target}")
    raise UsageError(f"unknown editor {spec!r}; use layout, http:URL or diffusers:MODEL")


# --------------------------------------------------------------------------- the commands


def typer_parameters(model: type[BaseModel], exclude: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """One keyword parameter per field of ``model``, with the Typer option its metadata describes."""
    out = []
    for name in field_order(model):
        f = model.model_fields[name]
        if name in exclude:
            continue
        extra = f.json_schema_extra or {}
        names = extra.get("names") or []
        default = f.get_default(call_default_factory=True)
        if extra.get("flag"):
            info = typer.Option(default, *(names or [f"--{name.replace('_', '-')}"]), metavar="(flag)",
                                help=f.description)
        else:
            info = typer.Option(default, *names, help=f.description)
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=f.annotation))
    return out


def field_order(model: type[BaseModel]) -> list[str]:
    """A command's own options first, then those it shares (placement, endpoint), as a reader meets them."""
    names: list[str] = []
    for cls in model.__mro__:
        for name in vars(cls).get("__annotations__", {}):
            if name in model.model_fields and name not in names:
                names.append(name)
    return names


def command_from(model: type[BaseModel], run: Callable[..., None], before: list[inspect.Parameter] | None = None,
                 exclude: tuple[str, ...] = ()) -> Callable[..., None]:
    """A Typer command whose options are ``model``'s fields (after the ``before`` parameters: arguments, the
    context); it calls ``run(options, **before)``."""
    before = before or []
    head = {p.name for p in before}

    def command(**kwargs) -> None:
        options = model(**{k: v for k, v in kwargs.items() if k not in head})
        return run(options, **{k: v for k, v in kwargs.items() if k in head})

    command.__signature__ = inspect.Signature([*before, *typer_parameters(model, exclude)])  # type: ignore[attr-defined]
    command.__doc__ = run.__doc__
    command.__name__ = run.__name__
    return command
