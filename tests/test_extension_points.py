"""One file adds an attack or a model family: a toy pixel attack declared by one decorated class joins a full audit
(R+, its δ, the gallery as a pixel attack, its passes), and a model family from one file of a plugin distribution
(tests/plugin_dist) loads, audits at the level its model type declares, and appears in the registry."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
from typer.testing import CliRunner

from mmaudit.pathways import registry
from mmaudit.pathways.pixel.base import PixelAttack


@registry.attack("toy_first_token", display="Toy first token", pathway="pixel", role="enhanced",
                 enhances=("end_pgd",), union_position=3)
@dataclass
class ToyFirstToken(PixelAttack):
    """Push down the log-probability of the first answer token only (and ``weight`` times it)."""

    weight: float = 1.0

    def objective(self, vlm, x_adv, samples, ctx):
        scores = vlm.score(x_adv, [s.prompt for s in samples], [s.answer for s in samples])
        first = scores.token_logprobs()[:, 0]
        misses = (scores.logits.argmax(-1) != scores.targets) & scores.mask
        return -self.weight * first, misses.any(-1).detach()


@pytest.fixture(scope="module", autouse=True)
def _unregister_after():
    yield
    registry.unregister("toy_first_token")


def test_the_registry_describes_the_toy_attack_and_its_fields_key_its_records():
    spec = registry.spec("toy_first_token")
    assert (spec.pathway, spec.role, spec.enhances, spec.counts_passes) == ("pixel", "enhanced", ("end_pgd",), True)
    assert registry.is_pixel("toy_first_token") and "toy_first_token" in registry.enhanced()
    assert "toy_first_token" not in registry.default_suite()  # the paper's suite is unchanged
    assert registry.union_order()[-1] == "toy_first_token"
    # a field of its own keys its records without any params() override
    assert ToyFirstToken(weight=2.0).params() != ToyFirstToken().params()
    assert ToyFirstToken(weight=2.0).params()["weight"] == 2.0
    assert "judge" not in ToyFirstToken().params() and "max_new_tokens" not in ToyFirstToken().params()


def test_the_default_suite_is_the_command_lines_default():
    from mmaudit.cli.options import AuditOptions

    assert AuditOptions().attacks == ",".join(registry.default_suite()) == "vis_pgd,end_pgd,mantis,typo_evid,nat_evid"


def test_a_toy_attack_runs_in_a_full_audit_and_joins_r_plus_with_its_delta(tmp_path):
    from mmaudit.audit import AuditConfig, run_audit
    from mmaudit.data.sources import load_data
    from mmaudit.models.zoo.adapter import load_zoo
    from mmaudit.report.build import rebuild

    samples = load_data("synthetic:4").samples
    cfg = AuditConfig(attacks=["end_pgd", "toy_first_token", "typo_evid"], steps=6, batch=6, recovery=0, ocr_limit=0)
    store = run_audit([load_zoo("L1")], samples, tmp_path, cfg)
    toy = [r for r in store.records("attack") if r["attack"] == "toy_first_token"]
    end = {r["sample"]: r["flipped"] for r in store.records("attack") if r["attack"] == "end_pgd"}
    correct = [r for r in store.records("clean") if r["correct"]]
    assert len(toy) == len(correct) > 0 and all(r["passes"] > 0 for r in toy)
    assert all(r["image"].startswith("adv/toy_first_token/") for r in toy)

    summary, _ = rebuild(tmp_path, n_boot=200)
    row = summary["models"][0]
    flips = {r["sample"] for r in toy if r["flipped"]}
    typo = {r["sample"] for r in store.records("attack") if r["attack"] == "typo_evid" and r["flipped"]}
    n = len(correct)
    # R+ is the union of all three over C; R0 leaves the toy out; its delta counts what End-PGD did not flip
    assert row["r_plus"] == pytest.approx(len(flips | typo | {s for s, f in end.items() if f}) / n)
    assert row["r0"] == pytest.approx(len(typo | {s for s, f in end.items() if f}) / n)
    assert row["delta"]["toy_first_token"] == pytest.approx(len({s for s in flips if not end[s]}) / n)
    assert "toy_first_token" in summary["mean_passes"] and summary["mean_passes"]["toy_first_token"] > 0
    assert "delta_toy_first_token" not in summary["coverage"]["not_measured"]

    html = (tmp_path / "report.html").read_text()
    assert "Toy first token" in html
    if flips:  # the gallery draws a flipped toy image as a pixel attack: adversarial image and its perturbation
        section = html[html.index("<h3>Toy first token</h3>"):]
        section = section[: section.index("<h3>", 5)] if "<h3>" in section[5:] else section
        assert "perturbation" in section and "overlay box outlined" not in section


def test_a_model_family_from_a_plugin_distribution_loads_audits_and_is_registered(tmp_path):
    """tests/plugin_dist's PaliGemma adapter, found through its entry point: nothing imports it by hand."""
    pytest.importorskip("transformers")
    from mmaudit.cli import app
    from mmaudit.models.hf import load_hf
    from mmaudit.models.hf.families import families
    from mmaudit.models.hf.tiny import save_tiny

    assert families()["paligemma"].adapter.__name__ == "PaliGemmaAdapter"
    folder = save_tiny(tmp_path / "paligemma", "paligemma")
    vlm = load_hf(str(folder))
    assert vlm.level == "L1" and type(vlm).__name__ == "PaliGemmaAdapter"
    x = torch.rand(1, 3, 40, 50, requires_grad=True)
    vlm.score(x, ["What is shown?"], ["ab"]).sequence_logprob().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0  # gradients reach the raw pixels

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["audit", "--model", str(folder), "--data", "synthetic:1", "--steps", "2",
                                   "--attacks", "end_pgd,typo_evid", "--n-boot", "50", "--recovery", "0",
                                   "--ocr-limit", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    models = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if '"kind": "model"' in x]
    assert [m["level"] for m in models] == ["L1"]


def test_a_saved_qwen3_vl_checkpoint_without_a_level_is_audited_as_l3(tmp_path):
    pytest.importorskip("transformers")
    from mmaudit.models.hf.tiny import save_tiny
    from mmaudit.models.load import load_model

    folder = save_tiny(tmp_path / "qwen3", "qwen3_vl")
    assert load_model(str(folder)).level == "L3"  # no @L3: the level comes from the model type
    assert load_model(f"{folder}@L2").level == "L2"  # an explicit level still wins


def test_every_registered_family_builds_its_tiny_model_at_its_level():
    pytest.importorskip("transformers")
    from mmaudit.models.hf.families import families
    from mmaudit.models.hf.registry import PAPER_MODELS

    for name, fam in families().items():
        if fam.model_type.tiny and name != "paligemma":
            assert fam.level == fam.tiny(name=name).level
    for e in PAPER_MODELS:  # the paper's taxonomy and the family registry agree
        if e.supported:
            assert families()[e.model_type].level == e.level, e.name
    assert all(e.supported for e in PAPER_MODELS)  # 18 of 18: Qwen-VL-Chat on its native implementation


def test_answer_only_targets_and_white_box_models_are_told_apart_by_protocol(zoo):
    from mmaudit.models.blackbox import EndpointVLM
    from mmaudit.models.vlm import VLM, Target

    endpoint = EndpointVLM("m", "http://127.0.0.1:9/v1")
    assert isinstance(endpoint, Target) and not isinstance(endpoint, VLM)
    assert isinstance(zoo["L1"], Target) and isinstance(zoo["L1"], VLM)


def test_the_sweep_runs_through_the_audits_executor_and_halves_a_unit_that_runs_out_of_memory(tmp_path, monkeypatch):
    from mmaudit.audit import executors
    from mmaudit.audit.sweep import SweepConfig, run_sweep
    from mmaudit.data.sources import load_data
    from mmaudit.models.zoo.adapter import load_zoo

    samples = load_data("synthetic:2").samples
    cfg = SweepConfig(seeds=[0], steps=[1, 2], eps=[8 / 255], batch=6)
    reference = run_sweep([load_zoo("L1")], samples, tmp_path / "ref", cfg)
    real, sizes = executors.Worker._run, []

    def tight(self, unit, *extra):  # a device that holds at most two samples of a sweep unit
        sizes.append(len(unit.ids))
        if unit.method == "sweep" and len(unit.ids) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real(self, unit, *extra)

    monkeypatch.setattr(executors.Worker, "_run", tight)
    store = run_sweep([load_zoo("L1")], samples, tmp_path / "oom", cfg)
    strip = lambda s: {r["key"]: r for r in s.records("sweep")}  # noqa: E731
    assert max(sizes) > 2 and strip(store) == strip(reference) and len(strip(store)) > 2
