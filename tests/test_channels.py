"""Delivery channels and defences (#44): the transforms, the adaptive model behind them (BPDA, straight-through,
EOT), what counts as a flip, the bare / non-adaptive / adaptive columns, both pathways and black-box targets."""

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
from test_attack_ensemble import MaskedToy, brightness_endpoint, grey_samples  # noqa: E402


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
    assert b.settings() == {"channel": "jpeg:90", "defence": "median:3", "bare_model": "toy-masked",
                            "bare_fingerprint": "toy-masked-1"}
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
    assert [m["model"] for m in models] == ["zoo-L1", "zoo-L1~jpeg:75"]  # the bare model first, then behind it
    behind = {r["key"] for r in recs if r["kind"] in ("clean", "attack") and r["model"] == "zoo-L1~jpeg:75"}
    bare = {r["key"] for r in recs if r["kind"] in ("clean", "attack") and r["model"] == "zoo-L1"}
    assert behind and bare and not behind & bare
    plain = tmp_path / "plain"  # the bare model's records are exactly a run without the channel's
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks",
                                   "end_pgd,typo_evid", "--steps", "3", "--n-boot", "50", "--recovery", "0",
                                   "--ocr-limit", "0", "--out", str(plain)])
    assert res.exit_code == 0, res.output
    alone = [json.loads(x) for x in (plain / "results.jsonl").read_text().splitlines()]
    assert {r["key"] for r in alone if r["kind"] in ("clean", "attack")} == bare
    bad = CliRunner().invoke(app, ["audit", "--channel", "jpeg:0", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "jpeg:0" in bad.output
    assert np.isfinite(json.loads((out / "summary.json").read_text())["models"][0]["clean_acc"])


class CheckerToy(MaskedToy):
    """A yes/no model that reads the image against a fine checkerboard plus a small uniform part: the bare model's
    steepest perturbation is the checkerboard, which a blur wipes out, while an attack made through the blur's
    stand-in finds the uniform brightening that survives it."""

    name = "toy-checker"

    @property
    def fingerprint(self) -> str:
        return "toy-checker-1"

    def _brightness(self, images) -> torch.Tensor:
        out = []
        for im in images:
            h, w = im.shape[-2:]
            checker = (torch.arange(h)[:, None] + torch.arange(w)[None, :]) % 2 * 2.0 - 1
            out.append((im * (checker + 0.5)).mean() - 0.25 * 255 / 255)  # 0 on flat mid-grey (0.5 * 0.5)
        return torch.stack(out)


def flat_samples(n: int) -> list:
    from mmaudit.data.loaders import make_sample

    image = np.full((16, 16, 3), 127, np.uint8)  # just below mid-grey: the toy says no
    return [make_sample(f"flat-{i}", image, f"Is picture {i} bright?", "no", "synthetic") for i in range(n)]


def test_bare_non_adaptive_and_adaptive_side_by_side_and_the_warning(tmp_path):
    """Each figure is hand-checkable: eps 8/255 raises the toy's score by 8/255 bare (the checkerboard), by about
    4/255 through the blur adaptively (the uniform part), and by nearly nothing for the checkerboard blurred; the
    toy says yes above 2/255."""
    import mmaudit

    toy = CheckerToy()
    result = mmaudit.audit([toy], flat_samples(3), out=tmp_path / "run", attacks="end_pgd", defence="blur:1.0",
                           steps=10, recovery=0, ocr_limit=0, n_boot=200)
    (row,) = result.summary["channels"]["models"]
    (end,) = row["attacks"]
    assert row["bare_model"] == "toy-checker" and row["defence"] == "blur:1" and row["n_correct"] == 3
    assert end["bare"][0] == 1.0 and end["non_adaptive"][0] == 0.0 and end["adaptive"][0] == 1.0
    assert row["r_plus"] == {"bare": [1.0, 1.0, 1.0], "non_adaptive": [0.0, 0.0, 0.0], "adaptive": [1.0, 1.0, 1.0]}
    assert any("End-PGD on toy-checker~blur:1" in w and "robustness that is not there" in w for w in result.warnings)
    assert any(s.startswith("Behind the delivery pipeline") for s in result.headline)
    recs = result.records("transfer")
    assert len(recs) == 3 and all(r["non_adaptive"] and r["source"] == "toy-checker" for r in recs)
    assert result.summary["transfer"] is None  # a model's own perturbations are no black-box transfer
    assert {m.model: m.level for m in result.models} == {"toy-checker": "L1", "toy-checker~blur:1": "L1~blur:1"}
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Delivery channel and defence" in report and "**Warning:** End-PGD on toy-checker\\~blur:1" in report


def test_without_the_bare_model_there_is_no_non_adaptive_column(tmp_path):
    import mmaudit

    result = mmaudit.audit([CheckerToy()], flat_samples(2), out=tmp_path / "run", attacks="end_pgd",
                           defence="blur:1.0", steps=10, recovery=0, ocr_limit=0, n_boot=100, adaptive_only=True)
    assert [m.model for m in result.models] == ["toy-checker~blur:1"]
    ((end,),) = [m["attacks"] for m in result.summary["channels"]["models"]]
    assert end["bare"] is None and end["non_adaptive"] is None and end["adaptive"][0] == 1.0  # n/a, not 0
    assert not result.summary["channels"]["warnings"] and not result.records("transfer")


def test_rendered_text_images_reach_the_model_through_the_pipeline(tmp_path):
    """Typo-Evid's edited image is shown to the model as the pipeline's real output (JPEG, then median)."""
    from mmaudit.audit.config import AuditConfig, make_attack
    from mmaudit.audit.plan import AuditPlan
    from mmaudit.audit.units import EditCache, text_attack_unit
    from mmaudit.data.synthetic import synthetic_set
    from mmaudit.models.zoo.adapter import load_zoo

    seen = []

    class Spy:  # the zoo model, every image it is asked to answer on kept
        def __init__(self, vlm) -> None:
            self.vlm = vlm

        def __getattr__(self, attr):
            return getattr(self.vlm, attr)

        def generate(self, images, prompts, max_new_tokens=16):
            seen.extend(images)
            return self.vlm.generate(images, prompts, max_new_tokens)

    pipeline = Pipeline.of("jpeg:75", "median:3")
    behind = ChannelVLM(Spy(load_zoo("L1")), pipeline)
    cfg = AuditConfig(attacks=["typo_evid"])
    samples = AuditPlan.build(synthetic_set(1), cfg).samples[:2]
    atk = make_attack("typo_evid", cfg)
    edits = EditCache()
    text_attack_unit(behind, atk, samples, ["k0", "k1"], edits, atk.judge, cfg, atk.params())
    edited = [torch.tensor(edits.get(atk, s)[0].image).permute(2, 0, 1).float() / 255 for s in samples]
    expected = [pipeline.real(x, torch.Generator()) for x in edited]
    assert seen and all(any(torch.equal(e, x) for x in seen) for e in expected)
    assert not any(torch.equal(e, x) for e in edited for x in seen)  # never the edited image as it was drawn


def test_an_endpoint_is_sent_what_its_channel_makes_of_each_image(tmp_path):
    """`--channel` on a black-box target: every request carries the channel's real output (Pillow's JPEG), and the
    target's name, level and record keys say so."""
    import base64
    import io

    from PIL import Image

    import mmaudit
    from mmaudit.models.chat.local_server import LocalChatServer

    samples = grey_samples(2)
    with LocalChatServer(answer=brightness_endpoint) as server:
        result = mmaudit.audit(f"endpoint:bright@{server.base_url}", samples, out=tmp_path / "run",
                               attacks="typo_evid", channel="jpeg:75", recovery=0, ocr_limit=0, n_boot=100,
                               no_canary=True)
        sent = []
        for body in server.bodies:
            for part in body["messages"][0]["content"]:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    with Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))) as im:
                        sent.append(np.asarray(im.convert("RGB")))
    assert [m.model for m in result.models] == ["endpoint-bright~jpeg:75"]  # an endpoint has no bare twin here

    def jpeg(a: np.ndarray) -> np.ndarray:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="JPEG", quality=75)
        return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))

    for s in samples:  # the clean pass sent each clean image as JPEG made it, never as it was
        assert any(np.array_equal(jpeg(s.image), x) for x in sent)
        assert not any(np.array_equal(s.image, x) for x in sent)


def test_transfer_shows_every_target_through_the_channel_and_crafts_through_it(tmp_path):
    """`audit transfer --channel`: the targets are the run's models behind the channel; a model's own images are its
    non-adaptive attack (the channel table), the other model's are transfer (the matrix); surrogate images are
    crafted through the channel, which their key says."""
    import json

    from typer.testing import CliRunner

    from mmaudit.cli import app

    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--model", "zoo:L2", "--data", "synthetic:1",
                                   "--attacks", "end_pgd,typo_evid", "--steps", "2", "--recovery", "0", "--ocr-limit",
                                   "0", "--n-boot", "50", "--out", str(run)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["audit", "transfer", str(run), "--channel", "jpeg:75", "--surrogates", "zoo:L2",
                                   "--surrogate-steps", "2", "--n-boot", "50"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    fps = {r["model"]: r["fingerprint"] for r in recs if r["kind"] == "model"}
    assert set(fps) == {"zoo-L1", "zoo-L2", "zoo-L1~jpeg:75", "zoo-L2~jpeg:75"}
    moved = [r for r in recs if r["kind"] == "transfer"]
    for r in moved:  # its own bare model's images: non-adaptive; anything else: a transfer
        own = r["source"] + "~jpeg:75" == r["model"]
        assert bool(r.get("non_adaptive")) == own
    assert {r["model"] for r in moved} == {"zoo-L1~jpeg:75", "zoo-L2~jpeg:75"}
    summary = json.loads((run / "summary.json").read_text())
    assert {m["model"] for m in summary["channels"]["models"]} == {"zoo-L1~jpeg:75", "zoo-L2~jpeg:75"}
    for m in summary["channels"]["models"]:  # not attacked through the channel: the adaptive column is n/a
        ((end,),) = [m["attacks"]]
        assert end["attack"] == "end_pgd" and end["non_adaptive"] is not None and end["adaptive"] is None
    assert not any(c["source"] + "~jpeg:75" == c["target"] for c in summary["transfer"]["matrix"])
    crafted = [r for r in recs if r["kind"] == "crafted"]
    assert crafted and all(r["params"]["channel"] == "jpeg:75" for r in crafted)
    again = CliRunner().invoke(app, ["audit", "transfer", str(run), "--channel", "bogus:1"])
    assert again.exit_code == 2 and "bogus" in again.output


def test_eot_defaults_to_autoattacks_twenty_only_for_a_random_defence_under_the_strong_preset():
    from mmaudit.cli.options import AuditOptions

    assert AuditOptions(strength="strong", defence="random-resize-pad:0.9-1.1").resolved_eot() == 20
    assert AuditOptions(strength="strong", channel="jpeg:75").resolved_eot() == 1  # nothing to average over
    assert AuditOptions(defence="random-resize-pad:0.9-1.1").resolved_eot() == 1  # the paper preset: as asked
    assert AuditOptions(strength="strong", defence="random-resize-pad:0.9-1.1", eot=3).resolved_eot() == 3
    with pytest.raises(UsageError, match="at least 1"):
        AuditOptions(eot=0).resolved_eot()


def test_the_random_defences_draw_per_application_and_their_stand_ins_by_hand():
    (noise,) = parse("noise:16", "--defence")
    x = torch.full((3, 8, 8), 0.5, requires_grad=True)
    a, b = (noise.real(x.detach(), torch.Generator().manual_seed(k)) for k in (1, 2))
    assert not torch.equal(a, b) and abs(float((a - x.detach()).std()) - 16 / 255) < 0.01  # sigma in pixel units
    y = noise.stand_in(x, torch.Generator().manual_seed(1))
    assert torch.equal(y.detach(), a)  # the same draw: the same image
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(g, ((a > 0) & (a < 1)).float())  # the identity where nothing was clipped
    (rj,) = parse("random-jpeg:30-90", "--defence")
    from mmaudit.models.transforms.jpeg import JPEG

    img = torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(0))
    qualities = {rj.draw(torch.Generator().manual_seed(k)).quality for k in range(20)}
    assert len(qualities) > 5 and min(qualities) >= 30 and max(qualities) <= 90
    q = rj.draw(torch.Generator().manual_seed(3)).quality
    assert torch.equal(rj.real(img, torch.Generator().manual_seed(3)), JPEG(q).real(img, None))
    with pytest.raises(UsageError, match="LO <= HI"):
        Pipeline.of(None, "random-jpeg:90-30")
