"""Tight risk: APGD's schedule and steps by hand, restarts as a per-sample worst case, End-PGD's margin objective,
the strength presets, and surrogate-ensemble transfer (crafted without the target, counted apart)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.sources import load_data
from mmaudit.pathways.pixel import EndPGD, VisPGD
from mmaudit.pathways.pixel.apgd import APGD, schedule


def test_apgd_checkpoints_follow_the_papers_recurrence():
    """p0 = 0, p1 = 0.22, p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06): at 100 iterations the checkpoints are
    22, 41, 57, 70, 80, 87, 93, 99."""
    first, shrink, minimum = schedule(100)
    points, interval, at = [], first, 0
    while at + interval < 100:
        at += interval
        points.append(at)
        interval = max(interval - shrink, minimum)
    assert points == [22, 41, 57, 70, 80, 87, 93, 99]


def test_apgd_steps_by_hand():
    """eps 0.1, so eta = 0.2; one coordinate in [-0.1, 0.1]."""
    apgd = APGD(0.1, 10)  # checkpoints every 2 iterations, then every 1
    project = lambda v: v.clamp(-0.1, 0.1)  # noqa: E731
    st = apgd.start()
    x = apgd.update(st, torch.tensor([0.0]), torch.tensor([1.0]), 1.0, project)
    assert x.item() == pytest.approx(0.1)  # first step, no momentum: P(0 + 0.2)
    x = apgd.update(st, x, torch.tensor([1.0]), 0.5, project)  # the loss fell: best stays the start
    assert x.item() == pytest.approx(0.1)  # P(0.1 + 0.75 * 0 + 0.25 * 0.1)
    # second iteration since the start: a checkpoint; the loss rose 0 times (< 0.75 * 2): halve, back to the best
    x = apgd.update(st, x, torch.tensor([1.0]), 0.4, project)
    assert st.eta == pytest.approx(0.1) and st.halvings == 1
    assert x.item() == pytest.approx(0.05)  # from 0: z = 0.1, 0 + 0.75 * 0.1 + 0.25 * (0 - 0.1)
    # after momentum-carrying steps, a rising loss keeps the step size
    st2, x2 = apgd.start(), torch.tensor([0.0])
    for k, loss in enumerate([0.0, 1.0, 2.0, 3.0]):
        x2 = apgd.update(st2, x2, torch.tensor([1.0 if k % 2 == 0 else -1.0]), loss, project)
    assert st2.eta == pytest.approx(0.2) and st2.halvings == 0


def test_default_settings_keep_the_keys_of_every_earlier_run():
    legacy = {"name": "end_pgd", "eps": 8 / 255, "steps": 40, "alpha": 1 / 255, "random_start": True, "seed": 0,
              "early_stop": True, "downscale": None}
    assert EndPGD().params() == legacy
    assert VisPGD().params() == legacy | {"name": "vis_pgd", "stage": "encoder"}
    strong = EndPGD(optimiser="apgd", steps=100, restarts=3).params()
    assert "alpha" not in strong and (strong["optimiser"], strong["restarts"], strong["steps"]) == ("apgd", 3, 100)
    assert EndPGD(loss="margin").params()["loss"] == "margin"
    assert VisPGD(optimiser="apgd").check_interval == 1 and VisPGD().check_interval == 5


@pytest.fixture(scope="module")
def chosen(zoo):
    from mmaudit.audit import AuditConfig, AuditPlan

    plan = AuditPlan.build(load_data("synthetic:3").samples, AuditConfig())
    vlm = zoo["L1"]
    right = [s for s, a in zip(plan.samples, vlm.generate(torch.stack([torch.from_numpy(s.image).permute(2, 0, 1)
                                                                          .float() / 255 for s in plan.samples]),
                                                          [s.prompt for s in plan.samples]))
             if a.strip().lower() == s.answer.strip().lower()]
    return vlm, right


def test_end_pgd_margin_is_the_wrong_answers_loglikelihood_minus_the_clean_answers(chosen):
    from mmaudit.audit.plan import attack_keys

    vlm, samples = chosen
    x = [torch.from_numpy(s.image).permute(2, 0, 1).float() / 255 for s in samples]
    atk = EndPGD(loss="margin")
    ctx = atk.prepare(vlm, x, samples)
    loss, _ = atk.objective(vlm, x, samples, ctx)
    prompts = [s.prompt for s in samples]
    right = vlm.score(x, prompts, [s.answer for s in samples]).sequence_logprob()
    wrong = vlm.score(x, prompts, [s.meta["wrong_answer"] for s in samples]).sequence_logprob()
    torch.testing.assert_close(loss, wrong - right, atol=1e-4, rtol=1e-4)
    assert atk.passes_per_step == 2 and EndPGD().passes_per_step == 1
    # a margin run's records depend on the wrong answer: its key does, the cross-entropy's does not
    s = samples[0]
    other = s.__class__(**{**s.__dict__, "meta": {**s.meta, "wrong_answer": "ZZZ"}})
    assert attack_keys("fp", [s], atk.params()) != attack_keys("fp", [other], atk.params())
    assert attack_keys("fp", [s], EndPGD().params()) == attack_keys("fp", [other], EndPGD().params())


def test_restarts_keep_the_worst_case_per_sample(chosen):
    vlm, samples = chosen
    one = EndPGD(steps=2)(vlm, samples)
    three = EndPGD(steps=2, restarts=3)(vlm, samples)
    assert all(f1 <= f3 for f1, f3 in zip(one.flipped, three.flipped))  # a restart can only add flips
    assert all(p3 >= p1 for p1, p3 in zip(one.passes, three.passes))
    for i, f in enumerate(one.flipped):
        if f:  # flipped by the first run: that image is kept, no further restart spent on it
            assert three.restart[i] == 0 and (three.adv_uint8[i] == one.adv_uint8[i]).all()
            assert three.passes[i] == one.passes[i]
        else:
            assert three.restart[i] > 0


@pytest.mark.parametrize("cls", [EndPGD, VisPGD])
def test_apgd_with_restarts_gives_each_sample_what_it_gets_alone_inside_the_ball(chosen, cls):
    """Per-sample step sizes, checkpoints and restarts: a batch never changes a sample's image or flip."""
    vlm, samples = chosen
    atk = cls(steps=6, optimiser="apgd", restarts=2)
    batch = atk(vlm, samples[:4])
    for i, s in enumerate(samples[:4]):
        alone = atk(vlm, [s])
        assert (alone.adv_uint8[0] == batch.adv_uint8[i]).all() and alone.flipped[0] == batch.flipped[i]
        assert alone.passes[0] == batch.passes[i]
        diff = batch.adv_uint8[i].astype(int) - s.image.astype(int)
        assert abs(diff).max() <= math.floor(8 / 255 * 255)  # in the eps-ball after quantisation


def test_random_crops_cover_the_asked_area_fraction():
    from mmaudit.pathways.pixel.surrogate import random_crop

    g, image = torch.Generator().manual_seed(0), torch.zeros(3, 100, 120)
    fractions = []
    for _ in range(300):
        crop = random_crop(image, (0.5, 0.9), g)
        fractions.append(crop.shape[1] * crop.shape[2] / (100 * 120))
        assert 0.75 - 0.02 <= crop.shape[2] / crop.shape[1] <= 4 / 3 + 0.02 or crop.shape[1:] == image.shape[1:]
    assert 0.48 <= min(fractions) and max(fractions) <= 0.92 and 0.6 < sum(fractions) / len(fractions) < 0.8


def tiny_clip(seed: int):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    from mmaudit.models.encoders import StandaloneEncoder

    torch.manual_seed(seed)
    model = CLIPVisionModelWithProjection(CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                           num_attention_heads=2, image_size=32, patch_size=8,
                                                           projection_dim=16))
    return StandaloneEncoder(model, (0.5,) * 3, (0.5,) * 3, f"tiny-clip-{seed}", "cpu")


def test_surrogate_crafting_moves_the_embedding_toward_the_target_and_asks_no_model(chosen):
    pytest.importorskip("transformers")
    import torch.nn.functional as F

    from mmaudit.models.encoders import Ensemble
    from mmaudit.models.vlm import to_image_tensor
    from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble

    _, samples = chosen
    ens = Ensemble((tiny_clip(0), tiny_clip(1)))
    atk = SurrogateEnsemble(ensemble=ens, steps=20, loss="match", features="pooled")
    res = atk.craft(samples)
    assert all(a == "" for a in res.answers) and not any(res.flipped)  # nothing was asked
    assert max(res.linf) <= math.floor(16 / 255 * 255 + 1e-6) / 255 + 1e-9 and max(res.linf) > 0
    with torch.no_grad():
        for enc in ens.members:
            t = F.normalize(enc.embed([to_image_tensor(atk.target(s).image) for s in samples]), dim=-1)
            c = F.normalize(enc.embed([to_image_tensor(s.image) for s in samples]), dim=-1)
            a = F.normalize(enc.embed([to_image_tensor(x) for x in res.adv_uint8]), dim=-1)
            assert ((a * t).sum(-1) > (c * t).sum(-1)).float().mean() >= 0.8  # closer to its target than clean
    assert atk.params()["ensemble"] == {"surrogates": ens.fingerprints}


class PixelTokens:
    """A toy surrogate: each pixel is a token whose features are its three channels; pooled, their mean."""

    name, fingerprint, device = "pixel tokens", "toy", torch.device("cpu")

    def features(self, images):
        return torch.stack([im.flatten(1).T for im in images])

    def embed(self, images):
        return self.features(images).mean(1)


def test_surrogate_losses_by_hand_on_a_toy_encoder():
    """2x2 images. Clean: red everywhere; target (the rendered image): green everywhere; the image scored: red on
    the top row, green on the bottom. Token cosines: to clean 2 / (2 * 2) = 1/2, to target 1/2. Pooled (mean
    colour): clean (1, 0, 0), target (0, 1, 0), image (1/2, 1/2, 0): both cosines 1/sqrt(2)."""
    from types import SimpleNamespace

    import numpy as np

    from mmaudit.models.encoders import Ensemble
    from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble

    def image(top, bottom):
        im = np.zeros((2, 2, 3), np.uint8)
        im[0, :, top], im[1, :, bottom] = 255, 255
        return im

    class Paint:  # the "rendered-text attack": paints the image green
        name = "paint"

        def __call__(self, sample):
            return SimpleNamespace(image=image(1, 1))

        def params(self):
            return {"name": "paint"}

    sample = SimpleNamespace(id="q", image=image(0, 0))
    scored = [torch.from_numpy(image(0, 1)).permute(2, 0, 1).float() / 255]
    expected = {("away", "tokens"): -0.5, ("match", "tokens"): 0.5, ("contrast", "tokens"): 0.0,
                ("away", "pooled"): -(0.5 ** 0.5), ("match", "pooled"): 0.5 ** 0.5, ("contrast", "pooled"): 0.0}
    for (loss, features), want in expected.items():
        atk = SurrogateEnsemble(ensemble=Ensemble((PixelTokens(), PixelTokens())), loss=loss, features=features,
                                target=Paint())
        x = [torch.from_numpy(sample.image).permute(2, 0, 1).float() / 255]
        got, _ = atk.objective(None, scored, [sample], atk.prepare(None, x, [sample]))
        assert got.item() == pytest.approx(want, abs=1e-6), (loss, features)
    assert "target" not in SurrogateEnsemble(loss="away").params()  # the away loss reads no target image
    assert SurrogateEnsemble(loss="match").params()["target"]["name"] == "typo_evid"


def test_token_features_see_crops_at_the_images_own_size():
    from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble

    g, image = torch.Generator().manual_seed(0), torch.rand(3, 40, 56)
    tokens = SurrogateEnsemble(features="tokens", crop_scale=(0.5, 0.9))
    pooled = SurrogateEnsemble(features="pooled", crop_scale=(0.5, 0.9))
    assert all(tokens.view(image, g).shape == image.shape for _ in range(20))
    assert any(pooled.view(image, g).shape != image.shape for _ in range(20))  # M-Attack's crops, as drawn
    assert SurrogateEnsemble().view(image, g) is image  # whole images by default


def test_surrogate_crafting_pushes_token_features_away_from_the_clean_image(chosen):
    pytest.importorskip("transformers")
    import torch.nn.functional as F

    from mmaudit.models.encoders import Ensemble
    from mmaudit.models.vlm import to_image_tensor
    from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble

    _, samples = chosen
    ens = Ensemble((tiny_clip(0), tiny_clip(1)))
    few = SurrogateEnsemble(ensemble=ens, steps=2).craft(samples)
    more = SurrogateEnsemble(ensemble=ens, steps=20).craft(samples)
    with torch.no_grad():
        for enc in ens.members:
            c = enc.features([to_image_tensor(s.image) for s in samples]).flatten(1)

            def sim(res, enc=enc, c=c):
                return F.cosine_similarity(enc.features([to_image_tensor(x) for x in res.adv_uint8]).flatten(1), c)

            assert (sim(more) < sim(few)).float().mean() >= 0.8 and (sim(more) < 0.999).all()


def records(path, kind):
    return [json.loads(x) for x in path.read_text().splitlines() if f'"kind": "{kind}"' in x]


def test_strength_presets_are_named_in_the_run_record_and_keyed(tmp_path):
    out = tmp_path / "strong"
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--data", "synthetic:1", "--strength", "strong",
                                   "--steps", "3", "--attacks", "end_pgd,vis_pgd", "--attack",
                                   "end_pgd:members=ce+dlr+square:20", "--attack", "vis_pgd:members=cosine:x3+square:5",
                                   "--n-boot", "50", "--recovery", "0", "--ocr-limit", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    run = records(out / "results.jsonl", "run")[-1]["params"]
    assert run["attack_strength"] == {"preset": "strong", "optimiser": "apgd", "steps": 3, "restarts": 1,
                                      "ensemble": True}
    params = {r["attack"]: r["params"] for r in records(out / "results.jsonl", "attack")}
    assert all((p["optimiser"], p["steps"]) == ("apgd", 3) and "restarts" not in p for p in params.values())
    assert params["end_pgd"]["members"] == ["ce", "dlr", "square:20"]
    for r in records(out / "results.jsonl", "attack"):  # who flipped it (or ran last), which run, what each cost
        assert r["member"] in r["member_passes"] and list(r["member_passes"])[-1] == r["member"]
        assert sum(r["member_passes"].values()) == r["passes"]
        assert r["restart"] in ((0, 1, 2) if r["member"] == "cosine:x3" else (0,))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strength"]["preset"] == "strong"
    assert params["end_pgd"]["odi"] == 2 and "odi" not in params["vis_pgd"]  # End-PGD's output-diversified starts
    assert any("strength strong (APGD, 3 steps per gradient member (output-diversified starts: End-PGD 2 ODI "
               "steps); ensembles End-PGD: ce → dlr → square:20; "
               "Vis-PGD: cosine:x3 → square:5)" in s for s in summary["headline"]["sentences"])
    bad = CliRunner().invoke(app, ["audit", "--strength", "hard", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--strength 'hard'" in bad.output


def test_the_strong_preset_runs_each_pixel_attack_as_its_ensemble_and_leaves_the_others_as_they_were():
    from mmaudit.audit.config import attack_params, make_attack
    from mmaudit.cli.options import AuditOptions

    strong = AuditOptions(strength="strong").audit_config()
    assert make_attack("end_pgd", strong).members == ("ce", "dlr", "margin:x2", "square:250")
    assert make_attack("vis_pgd", strong).members == ("cosine:x3", "square:250")
    assert make_attack("mantis", strong).members == ("divergence:x3", "square:250")
    assert list(attack_params("end_pgd", strong)["members"]) == ["ce", "dlr", "margin:x2", "square:250"]
    for preset in ("paper", "fast"):  # no ensemble: keys without members, as before
        cfg = AuditOptions(strength=preset).audit_config()
        assert all("members" not in attack_params(a, cfg) and "eot" not in attack_params(a, cfg)
                   for a in ("end_pgd", "vis_pgd", "mantis"))
    assert attack_params("end_pgd", AuditOptions().audit_config()) == EndPGD().params()  # the paper's keys


def test_leave_one_out_surrogates_transfer_and_never_count_for_a_target_they_were_made_from(tmp_path):
    from mmaudit.pathways import registry

    run = tmp_path / "run"
    base = ["--data", "synthetic:1", "--n-boot", "50", "--out", str(run)]
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--model", "zoo:L2", "--attacks", "end_pgd,typo_evid",
                                   "--steps", "2", "--recovery", "0", "--ocr-limit", "0", *base])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["audit", "transfer", str(run), "--surrogates", "leave-one-out",
                                   "--surrogate-steps", "3", "--n-boot", "50"])
    assert res.exit_code == 0, res.output
    crafted = records(run / "results.jsonl", "crafted")
    models = {r["model"]: r["fingerprint"] for r in records(run / "results.jsonl", "model")}
    ensembles = {r["fingerprint"]: r["members"] for r in crafted}
    assert len(ensembles) == 2 and all(len(m) == 1 for m in ensembles.values())  # each the other model's tower
    assert {m[0] for m in ensembles.values()} == set(models.values())
    for r in crafted:  # made for the clean-correct set of the model left out
        left_out = next(fp for fp in models.values() if fp not in r["members"])
        c = {x["sample"] for x in records(run / "results.jsonl", "clean") if x["fingerprint"] == left_out
             and x["correct"]}
        assert r["sample"] in c and (run / r["image"]).is_file()
    summary = json.loads((run / "summary.json").read_text())
    t = summary["transfer"]
    assert "surrogate" not in summary["attacks"]  # white-box tables leave it to the transfer tables
    for row in t["targets"]:
        fp = row["fingerprint"]
        got = [x for x in records(run / "results.jsonl", "transfer") if x["fingerprint"] == fp]
        c = {x["sample"] for x in records(run / "results.jsonl", "clean") if x["fingerprint"] == fp and x["correct"]}
        text = {x["sample"] for x in records(run / "results.jsonl", "attack") if x["fingerprint"] == fp
                and registry.is_text(x["attack"]) and x["flipped"]}
        sur = {x["sample"] for x in got if x["attack"] == "surrogate" and fp not in x["source_members"]
               and x["flipped"]}
        loss = {x["sample"] for x in got if x["attack"] != "surrogate" and x["source_fingerprint"] != fp
                and x["flipped"]}
        assert row["r_plus_surrogate"][0] == pytest.approx(len((text | sur) & c) / len(c))
        assert row["r_plus_output_loss"][0] == pytest.approx(len((text | loss) & c) / len(c))
        assert row["r_plus_black_box"][0] == pytest.approx(len((text | sur | loss) & c) / len(c))
    cells = [c for c in t["matrix"] if c["kind"] == "surrogate"]
    assert cells and all(c["from_target"] == (c["target_fingerprint"] in ensembles[c["source_fingerprint"]])
                         for c in cells)
    assert t["surrogate_setting"] == ("away (away from the clean image), token features, whole images, eps 16/255, "
                                      "3 steps")
    assert t["surrogate_setting"] in (run / "report.md").read_text()
    bad = CliRunner().invoke(app, ["audit", "transfer", str(run), "--surrogates", "leave-one-out",
                                   "--surrogate-loss", "closer"])
    assert bad.exit_code == 2 and "--surrogate-loss 'closer': one of match, away, contrast" in bad.output
