"""Delivery channels and defences (#44, first part): the transforms, the adaptive model behind them (BPDA,
straight-through, EOT) and what counts as a flip."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from mmaudit.errors import UsageError
from mmaudit.models.channel import ChannelVLM
from mmaudit.models.transforms import Pipeline, Transform, parse
from mmaudit.pathways.pixel import EndPGD

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_attack_ensemble import MaskedToy, grey_samples  # noqa: E402


def test_the_differentiable_jpeg_stays_within_the_stated_tolerance_of_pillows():
    pytest.importorskip("kornia")
    from mmaudit.data.sources import load_data
    from mmaudit.models.vlm import to_image_tensor

    (jpeg,) = parse("jpeg:75")
    for s in load_data("synthetic:1").samples:  # sharp text and shapes: mean |diff| 0.9-1.7 / 255 measured
        x = to_image_tensor(s.image, s.id)
        assert (jpeg.real(x, None) - jpeg.stand_in(x, None)).abs().mean() * 255 <= 2.0
    yy, xx = torch.meshgrid(torch.arange(48.0), torch.arange(40.0), indexing="ij")  # smooth, padded: 1.4 measured
    smooth = torch.stack([xx / 40, yy / 48, (xx + yy) / 88])
    diff = jpeg.real(smooth, None) - jpeg.stand_in(smooth, None)
    assert diff.abs().mean() * 255 <= 2.0 and tuple(diff.shape) == (3, 48, 40)  # sizes not multiples of 16


def test_straight_through_where_there_is_no_stand_in_by_hand():
    x = torch.tensor([[[0.10, 0.52]], [[0.30, 0.95]], [[0.0, 1.0]]], requires_grad=True)  # (3, 1, 2)
    out = Pipeline((), parse("bitdepth:2", "--defence")).adaptive(x, torch.Generator())
    # forward: the real transform (2 bits: multiples of 64/255, floored) ...
    expected = torch.tensor([[[0.0, 128 / 255]], [[64 / 255, 192 / 255]], [[0.0, 192 / 255]]])
    assert torch.allclose(out, expected)
    # ... backward: the identity (BPDA with the identity): d(sum w*out)/dx = w
    w = torch.arange(6.0).view(3, 1, 2)
    (g,) = torch.autograd.grad((w * out).sum(), x)
    assert torch.equal(g, w)


def test_a_stand_in_gives_its_gradient_while_the_model_sees_the_real_output():
    x = torch.rand(3, 20, 24, generator=torch.Generator().manual_seed(0), requires_grad=True)
    (blur,) = parse("blur:1.5", "--defence")
    out = Pipeline((), (blur,)).adaptive(x, torch.Generator())
    assert torch.allclose(out, blur.real(x, None))  # Pillow's blur in the forward pass
    w = torch.rand(3, 20, 24, generator=torch.Generator().manual_seed(1))
    (g,) = torch.autograd.grad((w * out).sum(), x)
    (g_stand_in,) = torch.autograd.grad((w * blur.stand_in(x, None)).sum(), x)
    assert torch.allclose(g, g_stand_in) and not torch.allclose(g, w)


def test_eot_averages_the_loss_over_its_draws_by_hand():
    calls = []

    @dataclass
    class Counting(EndPGD):
        def objective(self, vlm, x_adv, samples, ctx):
            calls.append(1)
            return torch.full((len(samples),), float(len(calls))), None

    loss, _ = Counting(eot=3)._objective(None, [torch.zeros(3, 2, 2)], grey_samples(1), {})
    assert loss.tolist() == [2.0]  # (1 + 2 + 3) / 3
    with pytest.raises(ValueError, match="eot must be at least 1"):
        EndPGD(eot=0)


@dataclass(frozen=True)
class Greyout(Transform):
    """A toy defence: the real one shows the model flat grey; its (misleading) stand-in is the identity."""

    name = "greyout"

    @property
    def spec(self) -> str:
        return "greyout"

    def real(self, x, rng):
        return torch.full_like(x, 128 / 255)

    def stand_in(self, x, rng):
        return x


def test_a_perturbation_that_flips_only_the_stand_in_is_not_a_flip():
    toy = MaskedToy()
    toy._brightness = lambda images: torch.stack([im.mean() for im in images]) - 128 / 255  # differentiable
    samples = grey_samples(2)
    bare = EndPGD(eps=8 / 255, steps=10)(toy, samples)
    assert all(bare.flipped)  # the bare model falls
    behind = ChannelVLM(toy, Pipeline((), (Greyout(),)))
    res = EndPGD(eps=8 / 255, steps=10)(behind, samples)
    assert not any(res.flipped)  # shown the real output (flat grey), the model answers right
    # while the same perturbation does flip the stand-in's view (the image itself)
    adv = [torch.tensor(a).permute(2, 0, 1).float() / 255 for a in res.adv_uint8]
    assert toy.generate(adv, ["q"] * 2) == ["yes", "yes"] and behind.generate(adv, ["q"] * 2) == ["no", "no"]


def test_the_pipeline_is_part_of_the_model_and_a_bad_spec_is_named():
    toy = MaskedToy()
    a, b = ChannelVLM(toy, Pipeline.of("jpeg:75", None)), ChannelVLM(toy, Pipeline.of("jpeg:90", "median:3"))
    assert a.name == "toy-masked~jpeg:75" and b.name == "toy-masked~jpeg:90+median:3"
    assert len({toy.fingerprint, a.fingerprint, b.fingerprint}) == 3
    assert b.settings() == {"channel": "jpeg:90", "defence": "median:3"}
    for spec, says in (("jpeg:101", "quality from 1 to 100"), ("median:4", "odd window"), ("warp:2", "unknown"),
                       ("random-resize-pad:1.2-0.8", "LO <= HI")):
        with pytest.raises(UsageError, match=says):
            Pipeline.of(spec, None)


def test_random_resize_pad_draws_per_call_and_the_verdict_is_reproducible():
    (rrp,) = parse("random-resize-pad:0.8-1.2", "--defence")
    x = torch.rand(3, 30, 30, generator=torch.Generator().manual_seed(0))
    shapes = {tuple(rrp.real(x, torch.Generator().manual_seed(k)).shape) for k in range(8)}
    assert shapes == {(3, 36, 36)}  # always the largest canvas, the image placed at random inside
    outs = {rrp.real(x, torch.Generator().manual_seed(k)).sum().item() for k in range(8)}
    assert len(outs) > 1
    toy = MaskedToy()
    behind = ChannelVLM(toy, Pipeline((), (rrp,)))
    assert behind._real([x], ["q"])[0].equal(behind._real([x], ["q"])[0])  # the verdict's draw: the image's own
    assert not behind._adaptive([x], ["q"])[0].equal(behind._adaptive([x], ["q"])[0])  # each step a new draw


def test_an_audit_behind_a_channel_keys_its_records_by_it(tmp_path):
    pytest.importorskip("kornia")
    from typer.testing import CliRunner

    from mmaudit.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks",
                                   "end_pgd,typo_evid", "--steps", "3", "--channel", "jpeg:75", "--n-boot", "50",
                                   "--recovery", "0", "--ocr-limit", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    import json

    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    models = [r for r in recs if r["kind"] == "model"]
    assert [m["model"] for m in models] == ["zoo-L1~jpeg:75"]
    assert all(r["model"] == "zoo-L1~jpeg:75" for r in recs if r["kind"] in ("clean", "attack"))
    bad = CliRunner().invoke(app, ["audit", "--channel", "jpeg:0", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "jpeg:0" in bad.output
    assert np.isfinite(json.loads((out / "summary.json").read_text())["models"][0]["clean_acc"])
