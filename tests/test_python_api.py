"""The public Python API: a model object the caller holds, audited through the public wrapper and left as it was;
attacks on tensors; the typed result against the records it is read from."""

from __future__ import annotations

import pytest
import torch

import mmaudit


def test_an_in_memory_hf_model_is_audited_and_left_as_the_caller_left_it(tmp_path):
    pytest.importorskip("transformers")
    from mmaudit.models.hf.families import families

    model, tokenizer, image_processor, extras = families()["qwen2_5_vl"].tiny_parts(seed=3)
    model.train()
    params = list(model.parameters())
    for i, p in enumerate(params):  # the caller's own mix: some trainable, some frozen
        p.requires_grad_(i % 3 != 0)
    before = [p.requires_grad for p in params]
    weights = [p.detach().clone() for p in params[:5]]

    vlm = mmaudit.wrap_hf(model, tokenizer=tokenizer, image_processor=image_processor, name="my-finetune", **extras)
    assert model.training and [p.requires_grad for p in params] == before  # wrapping changed nothing
    assert vlm.level == "L2"
    result = mmaudit.audit(vlm, "synthetic:1", attacks=["end_pgd", "typo_evid"], steps=2, recovery=2,
                           ocr_limit=0, n_boot=50, out=tmp_path / "run", reference="self")
    assert result.models[0].model == "my-finetune"
    assert model.training and [p.requires_grad for p in params] == before  # nor did the audit
    assert all(p.grad is None for p in params)  # gradients went to the pixels only
    assert all(torch.equal(w, p) for w, p in zip(weights, params[:5]))

    x = torch.rand(1, 3, 40, 48, requires_grad=True)
    vlm.score(x, ["What is shown?"], ["a"]).sequence_logprob().sum().backward()
    assert x.grad is not None and all(p.grad is None for p in params)  # a caller's backward leaves weights alone
    assert model.training


def test_a_tensor_attack_takes_a_batch_or_a_list_and_names_a_mismatch(zoo):
    from mmaudit.data.synthetic import make_sample

    samples = [make_sample("charts", i, seed=10_000) for i in range(2)]
    images = torch.stack([torch.from_numpy(s.image).permute(2, 0, 1).float() / 255 for s in samples])
    atk = mmaudit.VisPGD(zoo["L3"], eps=4 / 255, steps=3)
    adv = atk(images, [s.question for s in samples], [s.answer for s in samples])
    assert adv.shape == images.shape and float((adv - images).abs().max()) <= 4 / 255 + 1e-6
    assert torch.equal((adv * 255).round(), adv * 255)  # 8-bit values: what a PNG holds
    listed = atk(list(images), [s.question for s in samples], [s.answer for s in samples])
    assert isinstance(listed, list) and all(torch.equal(a, b) for a, b in zip(listed, adv))  # same seed, same images
    with pytest.raises(mmaudit.api.UsageError, match="2 images, 1 questions and 2 answers"):
        atk(images, [samples[0].question], [s.answer for s in samples])
    with pytest.raises(mmaudit.api.UsageError, match="typo_evid' is not a registered pixel attack"):
        mmaudit.attack("typo_evid", zoo["L3"])
    with pytest.raises(mmaudit.api.UsageError, match="end_pgd has no parameter 'stepz'"):
        mmaudit.EndPGD(zoo["L3"], stepz=3)


def test_the_result_is_the_union_of_the_records_it_is_read_from(tmp_path):
    result = mmaudit.audit("zoo:L1", "synthetic:2", attacks=["end_pgd", "typo_evid"], steps=3, recovery=0,
                           ocr_limit=0, n_boot=50, out=tmp_path / "run")
    clean = result.to_pandas("clean")
    attacks = result.to_pandas("attack")
    c = set(clean[clean.correct]["sample"])
    flipped = set(attacks[attacks.flipped]["sample"]) & c
    (model,) = result.models
    assert model.n_correct == len(c) and model.r_plus == pytest.approx(len(flipped) / len(c))
    assert result.levels["L1"].r_plus.value == pytest.approx(model.r_plus)  # one model: its level is its own
    assert mmaudit.open_run(tmp_path / "run").models == result.models
