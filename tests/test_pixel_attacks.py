"""Pixel attacks on the protocol: bounds, eps = 0 sanity, quantisation, MANTIS's single-token loss."""

import numpy as np
import pytest
import torch

from mmaudit.data.synthetic import make_sample
from mmaudit.models.vlm import AnswerScores
from mmaudit.models.zoo.adapter import ZooAdapter
from mmaudit.models.zoo.train import new_model
from mmaudit.pathways import registry
from mmaudit.pathways.pixel import MANTIS
from mmaudit.pathways.pixel.mantis import divergence_margin

# the built-in white-box pixel attacks (a test's toy attack registered elsewhere is not one of them)
WHITE_BOX = [n for n in registry.names("pixel") if registry.spec(n).cls.__module__.startswith("mmaudit.")
             and not registry.spec(n).transfer_only]


@pytest.fixture(scope="module")
def vlm():
    torch.manual_seed(0)
    return ZooAdapter(new_model("L3"))  # untrained weights: bounds and plumbing do not need accuracy


@pytest.fixture(scope="module")
def samples():
    return [make_sample(f, i, seed=7) for f in ("charts", "documents", "scenes") for i in range(2)]


@pytest.mark.parametrize("name", WHITE_BOX)
def test_eps_zero_reproduces_clean_answers(vlm, samples, name):
    x = torch.from_numpy(np.stack([s.image for s in samples])).permute(0, 3, 1, 2).float() / 255
    clean = vlm.generate(x, [s.question for s in samples], 16)
    res = registry.spec(name).cls(eps=0.0, steps=5)(vlm, samples)
    assert res.answers == clean
    assert all(np.array_equal(a, s.image) for a, s in zip(res.adv_uint8, samples))
    assert res.steps == [0] * len(samples)


@pytest.mark.parametrize("name", WHITE_BOX)
@pytest.mark.parametrize("downscale", [None, 32])
def test_adversarial_images_in_ball_and_range(vlm, samples, name, downscale):
    eps = 4 / 255
    res = registry.spec(name).cls(eps=eps, steps=3, early_stop=False, downscale=downscale)(vlm, samples)
    for adv, s, linf in zip(res.adv_uint8, samples, res.linf):
        assert adv.dtype == np.uint8 and adv.shape == s.image.shape
        diff = np.abs(adv.astype(int) - s.image.astype(int)).max()
        assert diff <= 4 and linf <= eps + 1e-9
    assert res.steps == [3] * len(samples)  # paper protocol: the full budget for everyone


def test_quantise_never_leaves_the_ball():
    atk = MANTIS(eps=2.5 / 255)
    x = torch.full((1, 3, 2, 2), 100.0)
    q = atk.quantise(x, torch.full((1, 3, 2, 2), 2.5 / 255))
    assert (q - x).abs().max() <= 2  # rounding 2.5 up would leave the ball


def test_mantis_loss_sits_on_the_first_divergent_token_only(vlm):
    s = make_sample("charts", 3, seed=7)
    atk = MANTIS(eps=8 / 255, steps=1)
    x = torch.from_numpy(s.image).permute(2, 0, 1)[None].float() / 255
    ctx = atk.prepare(vlm, x, [s])
    wrong = ctx["wrong_text"][0]
    c_ids, w_ids = vlm.answer_tokens(s.answer), vlm.answer_tokens(wrong)
    k = int(ctx["position"][0])
    assert c_ids[:k] == w_ids[:k] and c_ids[k] != w_ids[k]  # shared prefix, then divergence

    captured = {}

    class Spy:  # the real model, with its answer logits made a leaf we can differentiate against
        def __getattr__(self, name):
            return getattr(vlm, name)

        def score(self, images, prompts, answers):
            sc = vlm.score(images, prompts, answers)
            captured["logits"] = sc.logits.detach().requires_grad_(True)
            return AnswerScores(captured["logits"], sc.targets, sc.mask)

    margin, _ = atk.objective(Spy(), x, [s], ctx)
    (g,) = torch.autograd.grad(margin.sum(), captured["logits"])
    per_position = g.abs().sum(-1)[0]
    assert per_position[k] > 0
    assert torch.count_nonzero(per_position) == 1  # no gradient at any other answer position
    lp = captured["logits"][0, k].log_softmax(-1)
    assert margin.item() == pytest.approx((lp[w_ids[k]] - lp[c_ids[k]]).item(), abs=1e-5)


def test_divergence_margin_by_hand():
    logits = torch.zeros(2, 3, 4)
    logits[0, 1] = torch.tensor([0.0, 2.0, 0.0, 0.0])
    m = divergence_margin(logits, torch.tensor([1, 0]), torch.tensor([1, 2]), torch.tensor([0, 2]))
    assert m[0].item() == pytest.approx(2.0) and m[1].item() == 0.0
