"""Where users run real checkpoints, tested on CPU: device and precision plumbing, mixed-size batches, running out
of memory, activation checkpointing, and the label-free `--reference self`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from mmaudit.audit import AuditConfig, AuditPlan, LocalExecutor, drive, run_audit
from mmaudit.cli import app
from mmaudit.data.synthetic import FAMILIES, synthetic_set
from mmaudit.models.load import Placement, PlacementError

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from mmaudit.models.hf.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "qwen")


def records(store, kinds=("clean", "attack", "recovery")) -> dict:
    return {r["key"]: r for r in store.records() if r["kind"] in kinds}


def same(a, b, rel: float = 1e-5) -> bool:
    """Equal records, floats (attention ratios, maps) within float32's batch-to-batch rounding."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=rel, abs=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    return a == b


def test_audit_help_shows_where_and_how_a_model_runs():
    out = CliRunner().invoke(app, ["audit", "--help"], terminal_width=200).output
    for option in ("--device", "--dtype", "--device-map", "--max-pixels", "--activation-checkpointing", "--batch",
                   "--reference"):
        assert option in out, option
    assert "auto" in out and "hub id" in out


def test_placement_auto_is_the_cpu_in_float32_here_and_a_missing_gpu_is_a_clear_error():
    p = Placement()
    assert p.describe()["resolved_device"] == "cpu" and p.describe()["resolved_dtype"] == "float32"
    assert p.describe()["gpu"] is None and p.batch("auto") == 32 and p.resolved_checkpointing() == "none"
    assert p.resolved_checkpointing("cuda") == "mlp+norms"  # on a GPU: the norms and MLPs recomputed
    if not torch.cuda.is_available():
        with pytest.raises(PlacementError, match="no CUDA device"):
            Placement(device="cuda:0").resolved_device()
    with pytest.raises(PlacementError, match="--dtype"):
        Placement(dtype="fp8")
    with pytest.raises(PlacementError, match="--batch"):
        p.batch("0")


def test_a_bf16_model_keeps_a_float32_perturbation_and_its_own_keys(tiny_dir):
    from mmaudit.models.load import load_model
    from mmaudit.pathways.pixel import EndPGD

    fp32 = load_model(f"{tiny_dir}@L2", Placement(dtype="float32"))
    bf16 = load_model(f"{tiny_dir}@L2", Placement(dtype="bfloat16"))
    assert bf16.dtype == torch.bfloat16 and fp32.fingerprint != bf16.fingerprint  # never mixed in a store
    seen = []
    score = bf16.score

    def spy(images, prompts, answers):
        seen.extend(x.dtype for x in images)
        return score(images, prompts, answers)

    bf16.score = spy
    samples = synthetic_set(1, seed=10_000, families=FAMILIES)
    res = EndPGD(steps=2, early_stop=False)(bf16, samples)
    assert seen and set(seen) == {torch.float32}  # the attack's images (clean + delta) stay float32 pixels
    assert all(a.dtype == np.uint8 for a in res.adv_uint8) and max(res.linf) <= 8 / 255 + 1e-9


def test_the_run_records_device_dtype_and_gpu(tmp_path):
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks", "typo_evid",
                                   "--n-boot", "20", "--ocr-limit", "0", "--device", "cpu", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    (model,) = [r for r in recs if r["kind"] == "model"]
    assert (model["device"], model["dtype"], model["gpu"]) == ("cpu", "float32", None)
    run = next(r for r in recs if r["kind"] == "run")
    assert run["params"]["placement"]["resolved_device"] == "cpu" and run["params"]["batch_planned"] == 32


def sized_samples(n: int = 8):
    """Synthetic questions, each image resized to its own size (8 sizes)."""
    sizes = [(56, 56), (64, 80), (70, 50), (84, 84), (60, 100), (90, 66), (48, 112), (100, 72)]
    out = []
    for s, (h, w) in zip(synthetic_set(3, seed=10_000, families=FAMILIES), sizes[:n]):
        s.image = np.array(Image.fromarray(s.image).resize((w, h), Image.Resampling.BICUBIC))
        out.append(s)
    return out


def test_mixed_size_batches_give_the_records_of_batches_of_one(tiny_dir, tmp_path, monkeypatch):
    from mmaudit.audit import executors
    from mmaudit.models.load import load_model

    samples = sized_samples()
    assert len({s.image.shape for s in samples}) == 8
    vlm = load_model(f"{tiny_dir}@L2")
    batches = []
    real = executors.pixel_attack_unit
    monkeypatch.setattr(executors, "pixel_attack_unit",
                        lambda v, atk, chunk, *a: batches.append({c.image.shape for c in chunk}) or real(v, atk,
                                                                                                          chunk, *a))
    common = dict(attacks=["vis_pgd", "end_pgd", "mantis"], steps=3, recovery=0, ocr_limit=0, reference="self")
    mixed = run_audit([vlm], [s for s in samples], tmp_path / "mixed", AuditConfig(batch=8, **common))
    assert any(len(b) > 1 for b in batches)  # the attack batches held several sizes at once
    alone = run_audit([vlm], sized_samples(), tmp_path / "alone", AuditConfig(batch=1, **common))
    a, b = records(mixed), records(alone)
    assert a.keys() == b.keys() and len(a) > 8
    for k in a:
        for f in ("answer", "flipped", "steps", "passes", "linf", "correct"):
            assert a[k].get(f) == b[k].get(f), (a[k]["kind"], a[k].get("attack"), f, a[k].get(f), b[k].get(f))


def test_running_out_of_memory_halves_the_unit_and_records_each_key_once(tmp_path, monkeypatch):
    from mmaudit.audit import executors
    from mmaudit.models.zoo.adapter import load_zoo

    samples = synthetic_set(2, seed=10_000, families=FAMILIES)
    cfg = AuditConfig(attacks=["end_pgd", "mantis", "typo_evid"], steps=3, batch=8, recovery=4, ocr_limit=0)
    reference = run_audit([load_zoo("L2")], synthetic_set(2, seed=10_000, families=FAMILIES), tmp_path / "ref", cfg)

    calls = []
    real = executors.Worker._run

    def tight(self, unit, *extra):  # a device that holds at most two samples at once
        calls.append(len(unit.ids))
        if len(unit.ids) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real(self, unit, *extra)

    monkeypatch.setattr(executors.Worker, "_run", tight)
    plan = AuditPlan.build(samples, cfg)
    ex = LocalExecutor([load_zoo("L2")], plan)
    store = drive(ex, plan, tmp_path / "oom")
    assert ex.workers[0].splits >= 1 and max(calls) > 2 and ex.workers[0].cap == 2
    got, want = records(store), records(reference)
    assert got.keys() == want.keys() and all(same(got[k], want[k]) for k in got)
    lines = [json.loads(x)["key"] for x in (tmp_path / "oom" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(set(lines))  # nothing recorded twice


def test_one_sample_that_does_not_fit_is_a_clear_error(tmp_path, monkeypatch):
    from mmaudit.audit import executors
    from mmaudit.models.zoo.adapter import load_zoo

    def never(self, unit, *extra):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(executors.Worker, "_run", never)
    plan = AuditPlan.build(synthetic_set(1, seed=10_000, families=FAMILIES), AuditConfig(attacks=["end_pgd"]))
    with pytest.raises(executors.OutOfMemory, match="does not fit.*--max-pixels"):
        drive(LocalExecutor([load_zoo("L1")], plan), plan, tmp_path)


@pytest.mark.parametrize("mode", ["mlp", "mlp+norms", "layers"])
def test_activation_checkpointing_gives_the_same_scores_and_pixel_gradients(tiny_qwen, mode):
    samples = synthetic_set(1, seed=10_000, families=FAMILIES)[:2]
    x = torch.stack([torch.from_numpy(s.image).permute(2, 0, 1).float() / 255 for s in samples])
    prompts, answers = [s.question for s in samples], [s.answer for s in samples]

    def run(checkpoint):
        tiny_qwen.activation_checkpointing = checkpoint
        xi = x.clone().requires_grad_(True)
        lp = tiny_qwen.score(xi, prompts, answers).sequence_logprob()
        (g,) = torch.autograd.grad(lp.sum(), xi)
        return lp.detach(), g

    try:
        (lp0, g0), (lp1, g1) = run("none"), run(mode)
    finally:
        tiny_qwen.activation_checkpointing = "none"
    assert tiny_qwen.checkpointed_modules() and torch.allclose(lp0, lp1, atol=1e-5)
    assert torch.allclose(g0, g1, atol=1e-5) and g1.abs().sum() > 0


def test_reference_self_judges_flips_against_the_models_own_answer(tiny_dir, tmp_path):
    """A random-weight model gets every label wrong, so with labels C is empty; with --reference self C is every
    question it answered, and at eps 0 (no step, the clean image) nothing flips against its own answer."""
    args = ["audit", "--model", f"{tiny_dir}@L2", "--data", "synthetic:2", "--attacks", "end_pgd,mantis",
            "--n-boot", "20", "--ocr-limit", "0", "--recovery", "0"]
    res = CliRunner().invoke(app, [*args, "--eps", "0", "--out", str(tmp_path / "label")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "label" / "summary.json").read_text())["models"][0]["n_correct"] == 0
    res = CliRunner().invoke(app, [*args, "--eps", "0", "--reference", "self", "--out", str(tmp_path / "self")])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (tmp_path / "self" / "results.jsonl").read_text().splitlines()]
    clean = {r["sample"]: r for r in recs if r["kind"] == "clean"}
    attacks = [r for r in recs if r["kind"] == "attack"]
    answered = {s for s, r in clean.items() if r["answer"].strip()}
    assert answered and all(r["reference_mode"] == "self" for r in clean.values())
    assert {r["sample"] for r in attacks} == answered and not any(r["flipped"] for r in attacks)
    assert all(r["reference"] == clean[r["sample"]]["answer"].strip() for r in attacks)
    summary = json.loads((tmp_path / "self" / "summary.json").read_text())
    assert summary["models"][0]["n_correct"] == len(answered) and summary["models"][0]["r_plus"] == 0.0
    run = next(r for r in recs if r["kind"] == "run")
    assert run["params"]["reference"] == "self"


def test_batched_window_attention_gives_transformers_numbers():
    """Qwen2.5-VL's windows stacked per length through one SDPA call: the same features, scores and pixel gradients
    as transformers' one-call-per-window path."""
    from mmaudit.models.hf.qwen2_5_vl import Qwen2_5_VLAdapter
    from mmaudit.models.hf.tiny import tiny_qwen2_5_vl

    ours = Qwen2_5_VLAdapter(*tiny_qwen2_5_vl(seed=3), name="grouped")
    import mmaudit.models.hf.qwen2_5_vl as qwen

    stock_model, tok, ip = tiny_qwen2_5_vl(seed=3)
    real, qwen.batch_windows = qwen.batch_windows, lambda model: 0  # transformers' own path
    try:
        stock = Qwen2_5_VLAdapter(stock_model, tok, ip, name="stock")
    finally:
        qwen.batch_windows = real
    assert ours.batched_windows == 2 and stock.batched_windows == 0
    x = torch.rand(2, 3, 112, 168)
    torch.testing.assert_close(ours.vision_features(x), stock.vision_features(x), atol=1e-5, rtol=1e-5)
    grads = []
    for vlm in (ours, stock):
        xi = x.clone().requires_grad_(True)
        lp = vlm.score(xi, ["what ?", "how many ?"], ["12", "3"]).sequence_logprob()
        grads.append((lp.detach(), torch.autograd.grad(lp.sum(), xi)[0]))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-6, rtol=1e-4)


def test_each_checkpointing_mode_keeps_less_and_mlp_norms_keeps_no_float32_copy_of_the_residual_stream(tiny_dir):
    """In bfloat16 an RMSNorm keeps a float32 copy of its input for the backward; recomputing the norms drops those
    copies (the reason for mlp+norms), and each mode keeps strictly less than the one before it."""
    from mmaudit.models.load import load_model

    vlm = load_model(f"{tiny_dir}@L2", Placement(dtype="bfloat16"))
    sample = synthetic_set(1, seed=10_000, families=FAMILIES)[0]
    x = (torch.from_numpy(sample.image).permute(2, 0, 1).float() / 255).requires_grad_(True)
    widths = {vlm.model.config.text_config.hidden_size, vlm.model.config.vision_config.hidden_size}

    def kept(mode):
        vlm.activation_checkpointing = mode
        saved = {}

        def pack(t):
            saved[t.untyped_storage().data_ptr()] = t
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp = vlm.score(x[None], [sample.question], [sample.answer]).sequence_logprob()
        torch.autograd.grad(lp.sum(), x)
        params = {p.untyped_storage().data_ptr() for p in vlm.model.parameters()}
        tensors = [t for ptr, t in saved.items() if ptr not in params]
        copies = [t for t in tensors if t.dtype == torch.float32 and t.ndim >= 2 and t.shape[-1] in widths]
        return sum(t.untyped_storage().nbytes() for t in tensors), len(copies)

    (none, c_none), (mlp, c_mlp), (light, c_norms), (layers, _) = map(kept, ("none", "mlp", "mlp+norms", "layers"))
    assert none > mlp > light > layers
    vlm.activation_checkpointing = "mlp+norms"
    norms = sum("RMSNorm" in type(m).__name__ for m in vlm.checkpointed_modules())
    assert norms == 2 * (len(vlm.decoder_layers) + len(vlm.model.model.visual.blocks))  # two per block
    # one float32 copy per norm; the two left under mlp+norms are the norms outside the blocks (final, merger)
    assert c_none == c_mlp == norms + 2 and c_norms == 2


@pytest.mark.parametrize("family", ["tiny_qwen2", "tiny_qwen3", "tiny_llava", "tiny_gemma3", "tiny_blip2",
                                    "tiny_instructblip", "tiny_smolvlm", "tiny_gemma4", "tiny_deepseek_vl"])
def test_mlp_norms_checkpointing_leaves_every_familys_pixel_gradient_unchanged(family, request):
    """The GPU default wraps whatever norms a family's blocks hold (RMSNorm, LayerNorm); none may change a number."""
    vlm = request.getfixturevalue(family)
    sample = synthetic_set(1, seed=10_000, families=FAMILIES)[0]
    x = torch.from_numpy(sample.image).permute(2, 0, 1).float() / 255

    def run(mode):
        vlm.activation_checkpointing = mode
        xi = x.clone().requires_grad_(True)
        lp = vlm.score(xi[None], [sample.question], [sample.answer]).sequence_logprob()
        return lp.detach(), torch.autograd.grad(lp.sum(), xi)[0]

    try:
        (lp0, g0), (lp1, g1) = run("none"), run("mlp+norms")
        vlm.activation_checkpointing = "mlp+norms"
        assert any("norm" in type(m).__name__.lower() for m in vlm.checkpointed_modules())
    finally:
        vlm.activation_checkpointing = "none"
    assert torch.allclose(lp0, lp1, atol=1e-5) and torch.allclose(g0, g1, atol=1e-5) and g1.abs().sum() > 0
