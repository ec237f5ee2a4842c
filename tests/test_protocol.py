"""One protocol suite for every adapter: the shipped zoo levels and a real HF architecture."""

import numpy as np
import pytest
import torch

from conftest import tiny_model
from mmaudit.data.synthetic import make_sample
from mmaudit.errors import InputError
from mmaudit.models.vlm import VLM, PatchGrid


def registered_types() -> list[str]:
    """Every model type the family registry holds with a tiny test model (the built-in adapters)."""
    try:
        from mmaudit.models.hf.families import families
    except ImportError:  # pragma: no cover - without the [hf] extra
        return []
    return [name for name, fam in families().items() if fam.model_type.tiny
            and fam.adapter.__module__.startswith("mmaudit.")]


HF_TYPES = registered_types()
ADAPTERS = ["zoo-L1", "zoo-L2", "zoo-L3", *HF_TYPES]


@pytest.fixture(params=ADAPTERS)
def vlm(request):
    if request.param.startswith("zoo"):
        return request.getfixturevalue("zoo")[request.param[-2:]]
    return tiny_model(request.param)


def batch(n=3):
    samples = [make_sample("charts", i, seed=123) for i in range(n)]
    images = torch.from_numpy(np.stack([s.image for s in samples])).permute(0, 3, 1, 2).float() / 255
    return samples, images


def test_is_a_vlm(vlm):
    assert isinstance(vlm, VLM)
    assert vlm.level in ("L1", "L2", "L3")
    assert len(vlm.fingerprint) == 16


def test_generate_batched_matches_single(vlm):
    samples, images = batch()
    prompts = [s.question for s in samples]
    many = vlm.generate(images, prompts, max_new_tokens=6)
    one = [vlm.generate(images[i : i + 1], prompts[i : i + 1], max_new_tokens=6)[0] for i in range(3)]
    assert many == one and all(isinstance(a, str) for a in many)


def test_pixel_gradient_of_answer_logprob_is_finite_and_nonzero(vlm):
    samples, images = batch()
    x = images.clone().requires_grad_(True)
    lp = vlm.score(x, [s.question for s in samples], [s.answer for s in samples]).sequence_logprob()
    assert lp.shape == (3,) and torch.isfinite(lp).all()
    (grad,) = torch.autograd.grad(lp.sum(), x)
    assert torch.isfinite(grad).all()
    assert (grad.flatten(1).abs().sum(1) > 0).all()  # every sample gets a gradient


def test_score_is_teacher_forced_over_answer_tokens(vlm):
    samples, images = batch(2)
    answers = ["12", "345"]
    s = vlm.score(images, [x.question for x in samples], answers)
    assert s.mask.sum(1).tolist() == [len(vlm.answer_tokens(a)) for a in answers]
    assert s.targets[0, : s.mask[0].sum()].tolist() == vlm.answer_tokens("12")


def test_vision_features_differentiable(vlm):
    _, images = batch(2)
    x = images.clone().requires_grad_(True)
    f = vlm.vision_features(x)
    assert f.ndim == 3 and f.shape[0] == 2
    (g,) = torch.autograd.grad(f.square().sum(), x)
    assert g.abs().sum() > 0


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    if hasattr(obj, "values"):  # a ModelOutput
        return [t for o in obj.values() for t in _tensors(o)]
    return []


@pytest.mark.parametrize("name", HF_TYPES)
def test_vision_features_are_the_towers_own_output(name):
    """Vis-PGD's features are rows the vision tower itself emitted while the model answered (any connector
    comes after): every feature row is found among the tower's outputs, at the tower's width, not the LM's."""
    vlm = tiny_model(name)
    samples, images = batch(2)
    seen: list[torch.Tensor] = []
    handle = vlm.vision_module.register_forward_hook(lambda _m, _a, out: seen.extend(_tensors(out)))
    try:
        with torch.no_grad():
            vlm.score(images, [s.question for s in samples], ["1", "1"])
    finally:
        handle.remove()
    with torch.no_grad():
        feats = vlm.vision_features(images)
        connector = vlm.vision_features(images, stage="connector")
    vc = vlm.model.config.vision_config
    width = getattr(vc, "embed_dim", None) or vc.hidden_size  # Qwen2-VL calls the ViT width embed_dim
    text_width = vlm.model.config.get_text_config().hidden_size
    assert width != text_width  # the tiny configs keep the two apart, so the check below can tell them apart
    assert feats.shape[0] == 2 and feats.shape[-1] == width and connector.shape[-1] == text_width
    rows = torch.cat([t.reshape(-1, width) for t in seen if t.shape[-1] == width]).float()
    exact = "donot_use_mm_for_euclid_dist"
    dist = torch.cdist(feats.reshape(-1, width).float(), rows, compute_mode=exact).min(1).values
    assert float(dist.max()) < 1e-4


def test_replacing_hidden_states_changes_output(vlm):
    samples, images = batch(2)
    prompts = [s.question for s in samples]
    hidden = vlm.hidden_states(images, prompts)
    assert len(hidden) == len(vlm.decoder_layers)
    positions = vlm.image_positions(images, prompts)
    clean_logits = vlm.score(images, prompts, ["1", "1"]).logits
    from mmaudit.models.vlm import replace_hidden

    noise = [torch.randn(len(p), hidden[0].shape[-1]) * 10 for p in positions]
    with replace_hidden(vlm.decoder_layers[0], positions, noise):
        patched = vlm.score(images, prompts, ["1", "1"]).logits
    assert not torch.allclose(clean_logits, patched)
    # patching with the model's own clean states is a no-op
    own = [hidden[0][b, p] for b, p in enumerate(positions)]
    assert vlm.generate_patched(images, prompts, 0, own, max_new_tokens=5) == vlm.generate(images, prompts, 5)


def test_attentions_and_patch_grid(vlm):
    samples, images = batch(2)
    att = vlm.attentions(images, [s.question for s in samples])
    grid = vlm.patch_grid(images[0])
    assert isinstance(grid, PatchGrid)
    for a in att:
        assert a.shape[1] == grid.rows * grid.cols and a.shape[0] >= 1
        assert (a >= 0).all() and (a.sum(-1) <= 1 + 1e-4).all()


def test_bad_input_names_the_sample(vlm):
    samples, images = batch(2)
    with pytest.raises(InputError, match="sample 1.*question.*empty"):
        vlm.generate(images, ["ok ?", " "])
    with pytest.raises(InputError, match="sample 0.*image"):
        vlm.generate(["not an image", images[1]], ["a ?", "b ?"])
    with pytest.raises(InputError, match="sample 1.*shape"):
        vlm.generate([images[0], images[1][:2]], ["a ?", "b ?"])
    with pytest.raises(InputError, match="\\[0, 1\\]"):
        vlm.generate(images * 255, ["a ?", "b ?"])


def test_patch_grid_region_mapping_on_known_grid():
    g = PatchGrid(rows=4, cols=4, height=64, width=64)  # 16 px patches
    assert g.region_to_patches((0, 0, 16, 16)) == [0]
    assert g.region_to_patches((16, 16, 48, 32)) == [5, 6]
    assert g.region_to_patches((8, 0, 24, 8)) == [0, 1]
    assert g.region_to_patches((60, 60, 64, 64)) == [15]


def test_end_pgd_lowers_the_correct_answers_logprob_in_5_steps(vlm):
    from mmaudit.models.vlm import pixels
    from mmaudit.pathways.pixel import EndPGD

    samples, images = batch(2)
    prompts, answers = [s.question for s in samples], [s.answer for s in samples]
    res = EndPGD(steps=5, early_stop=False, random_start=False)(vlm, samples)
    with torch.no_grad():
        before = vlm.score(images, prompts, answers).sequence_logprob()
        after = vlm.score(pixels(res.adv_uint8), prompts, answers).sequence_logprob()
    assert (after < before).all(), (before, after)


def test_a_long_prompt_in_the_batch_changes_no_other_answer(zoo):
    """The zoo's text positions are absolute slots: a batch padded to a long prompt used to move every other
    prompt off its trained positions (all six answers wrong in an audit holding one long hostile question)."""
    from mmaudit.data.synthetic import FAMILIES, synthetic_set
    from mmaudit.models.vlm import pixels

    ss = synthetic_set(2, seed=10_000, families=FAMILIES)
    qs, ims = [s.question for s in ss], [s.image for s in ss]
    long = "<script>document.body.dataset.x=1</script> | what is the value of the VAT of it today ?"
    for vlm in zoo.values():
        alone = vlm.generate(pixels(ims), qs)
        assert vlm.generate(pixels(ims + ims[:1]), qs + [long])[:-1] == alone
        answers = [s.answer for s in ss]
        a = vlm.score(pixels(ims), qs, answers)
        b = vlm.score(pixels(ims + ims[:1]), qs + [long], answers + answers[:1])
        torch.testing.assert_close(b.logits[:-1], a.logits, atol=1e-4, rtol=1e-4)
