"""OAR on hand-built attention, the patch grid, what layer recovery can and cannot undo, the sweep."""

import numpy as np
import pytest
import torch

from mmaudit.audit.sweep import SweepConfig, summarise_sweep
from mmaudit.data.synthetic import FAMILIES, make_sample
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import PatchGrid, pixels
from mmaudit.pathways.diagnostics.oar import attention_map, oar, region_patches
from mmaudit.pathways.diagnostics.recovery import recover, unsupported
from mmaudit.pathways.pixel import MANTIS
from mmaudit.stats import bootstrap_groups
from mmaudit.store import RunStore


def test_patch_grid_maps_a_region_on_a_known_grid():
    grid = PatchGrid(rows=4, cols=4, height=32, width=32)  # 8 px patches, row-major
    assert grid.region_to_patches((8, 0, 16, 16)) == [1, 5]
    assert grid.region_to_patches((0, 24, 32, 32)) == [12, 13, 14, 15]
    assert grid.region_to_patches((4, 4, 12, 8)) == [0, 1]  # any overlap counts by default
    assert grid.region_to_patches((4, 4, 12, 8), min_overlap=0.25) == []  # each overlap is 4x4 = 1/4 of a patch
    with pytest.raises(ValueError, match="does not match"):
        region_patches(grid, (0, 0, 8, 8), n_tokens=64)
    # a split image: two 1x2 tiles side by side, then a 1x1 global view of the whole 32x16 image
    from mmaudit.models.vlm import TiledGrid

    tiles = TiledGrid([PatchGrid(1, 2, 16, 16), PatchGrid(1, 2, 16, 16, x0=16), PatchGrid(1, 1, 16, 32)], 16, 32)
    assert tiles.n_tokens == 5 and tiles.region_to_patches((20, 2, 22, 4)) == [2, 4]


def test_oar_on_hand_built_attention():
    uniform = torch.full((3, 16), 1 / 32)  # half of each text token's attention goes to the image, evenly
    assert oar(uniform, [0, 1]) == pytest.approx(1.0)
    focused = torch.zeros(2, 16)
    focused[:, 0] = 0.6  # all image-directed attention on patch 0
    assert oar(focused, [0, 1]) == pytest.approx(8.0)  # share 1 / area 2/16
    mixed = torch.zeros(2, 16)
    mixed[0, 0] = 1.0  # token 1 looks at the overlay, token 2 elsewhere
    mixed[1, 10] = 1.0
    assert oar(mixed, [0]) == pytest.approx(0.5 * 16)
    with pytest.raises(ValueError):
        oar(uniform, [])


def test_attention_map_by_hand():
    """A 2 x 2 grid over a 4 x 6 image: all attention on patch 1 (top right) puts density 4 (a quarter of the
    image holds all of it) on the top-right cells and 0 elsewhere; even attention reads 1 everywhere."""
    grid = PatchGrid(rows=2, cols=2, height=4, width=6)
    hot = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0]])
    m = np.array(attention_map(hot, grid, 4, 6, side=6))
    assert m.shape == (4, 6)
    assert np.allclose(m[:2, 3:], 4.0) and np.allclose(m[2:, :], 0.0) and np.allclose(m[:, :3], 0.0)
    even = np.array(attention_map(torch.ones(3, 4), grid, 4, 6, side=3))
    assert even.shape == (2, 3) and np.allclose(even, 1.0)


def _pairs(n=6):
    samples = [make_sample(f, i, seed=10_000) for f in FAMILIES for i in range(n // 3)]
    others = [make_sample(f, i + 50, seed=10_000).image for f in FAMILIES for i in range(n // 3)]
    return samples, others


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_a_patch_at_the_last_layer_never_recovers(zoo, level):
    """Text positions read a layer's keys and values from its *input*: patching what the last layer returns at
    the image positions cannot reach the answer, so the patched answer is the attacked one, token for token."""
    vlm = zoo[level]
    samples, others = _pairs()
    attacked = vlm.generate(pixels(others), [s.question for s in samples], 16)
    rows = recover(vlm, samples, others, Judge(), 16)
    assert [r["answers_by_layer"][-1] for r in rows] == attacked
    assert not any(len(vlm.decoder_layers) - 1 in r["recovered_layers"] for r in rows if r["reproduced"])


def test_a_patch_at_the_last_layer_never_recovers_on_a_real_architecture(tiny_qwen):
    samples, others = _pairs()
    attacked = tiny_qwen.generate(pixels(others), [s.question for s in samples], 6)
    rows = recover(tiny_qwen, samples, others, Judge(), 6)
    assert [r["answers_by_layer"][-1] for r in rows] == attacked


@pytest.mark.parametrize("level", ["L1", "L2"])
def test_a_layer_0_patch_is_not_a_replay_of_the_clean_run(zoo, level):
    """No re-injection (L1, L2): patching layer 0's output at the image tokens keeps layer 0's reading of the
    attacked image, so the patched run differs from the clean one; it is not 100% recovery by construction."""
    from mmaudit.models.vlm import replace_hidden

    vlm = zoo[level]
    samples, others = _pairs()
    prompts, answers = [s.question for s in samples], [s.answer for s in samples]
    clean, attacked = pixels([s.image for s in samples]), pixels(others)
    hidden = vlm.hidden_states(clean, prompts)
    pos = vlm.image_positions(clean, prompts)
    with torch.no_grad():
        want = vlm.score(clean, prompts, answers).logits
        adv = vlm.score(attacked, prompts, answers).logits
        with replace_hidden(vlm.decoder_layers[0], pos, [hidden[0][b, p] for b, p in enumerate(pos)]):
            patched = vlm.score(attacked, prompts, answers).logits
    assert (patched - want).abs().max() > 1e-3  # still reads the attacked image at layer 0
    assert (patched - adv).abs().max() > 1e-3  # and the patch does reach later layers
    # every prompt position patched at layer 0: the first answer token is predicted from clean states alone
    every = [torch.arange(hidden[0].shape[1]) for _ in samples]
    with torch.no_grad(), replace_hidden(vlm.decoder_layers[0], every, [hidden[0][b] for b in range(len(samples))]):
        first = vlm.score(attacked, prompts, answers).logits[:, 0]
    torch.testing.assert_close(first, want[:, 0], rtol=1e-4, atol=1e-4)


def test_deepstack_re_injection_undoes_an_early_patch(zoo):
    """Zoo L3 adds attacked encoder features after layers 0-2: a patch there is re-perturbed, so recovery at
    those depths is rarer than at L2, where nothing re-enters (swapped images as the 'attack')."""
    samples, others = _pairs(12)
    rate = {}
    for level in ("L2", "L3"):
        rows = [r for r in recover(zoo[level], samples, others, Judge(), 16) if r["reproduced"]]
        rate[level] = sum(0 in r["recovered_layers"] for r in rows) / len(rows)
    assert rate["L3"] < rate["L2"]


def test_recovery_counts_a_flip_recovered_only_when_it_reproduces(zoo):
    vlm = zoo["L1"]
    samples, others = _pairs()
    rows = recover(vlm, samples, others, Judge(), 16, positions="prompt")
    for r, s in zip(rows, samples):
        assert r["recovered"] == (r["reproduced"] and bool(r["recovered_layers"]))
        if r["reproduced"]:
            assert 0 in r["recovered_layers"] or not Judge()(r["answers_by_layer"][0], s.answer, s.task_family,
                                                                s.answer_type)


def test_an_adapter_without_hooks_is_excluded_with_a_reason():
    class Blind:
        name, level = "blind", "L1"

        @property
        def decoder_layers(self):
            raise NotImplementedError

    assert "decoder_layers" in unsupported(Blind())


def test_one_long_run_gives_the_flips_of_every_shorter_budget(zoo):
    vlm = zoo["L2"]
    samples = [make_sample(f, i, seed=10_000) for f in FAMILIES for i in range(3)]
    long = MANTIS(eps=4 / 255, steps=12, checkpoints=(4, 8, 12))(vlm, samples)
    for budget in (4, 8):
        short = MANTIS(eps=4 / 255, steps=budget)(vlm, samples)
        assert long.flipped_at[budget] == short.flipped, budget
    assert long.flipped_at[12] == long.flipped


def test_sweep_summaries_from_a_hand_built_store(tmp_path):
    store = RunStore(tmp_path / "r.jsonl")
    cfg = SweepConfig(seeds=[0, 1], steps=[40, 50], eps=[4 / 255, 8 / 255])
    # two models, 4 clean-correct questions each; flips chosen so every number is known
    flips = {("a", "L1"): {0: ([1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]),
                           1: ([1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0])},
             ("b", "L2"): {0: ([0, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]),
                           1: ([0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0])}}
    for (m, lv), by_seed in flips.items():
        for q in range(4):
            store.put({"kind": "clean", "key": f"c{m}{q}", "fingerprint": m, "model": m, "level": lv,
                       "sample": str(q), "correct": True})
        for seed, (e4s40, e4s50, e8s40, e8s50) in by_seed.items():
            for q in range(4):
                for eps, s40, s50 in ((4 / 255, e4s40, e4s50), (8 / 255, e8s40, e8s50)):
                    store.put({"kind": "sweep", "key": f"{m}{seed}{eps}{q}", "fingerprint": m, "model": m,
                               "level": lv, "sample": str(q), "seed": seed, "eps": eps,
                               "flipped_at": {"40": bool(s40[q]), "50": bool(s50[q])}})
    s = summarise_sweep(store, cfg)
    # ASR at 8/255, 40 steps: a 0.75/0.75 -> std 0; b 0.25/0.25 -> std 0
    assert s["median_std_main"] == pytest.approx(0.0)
    # gain 40 -> 50 at 8/255: L1 (1.0 + 0.75)/2 - 0.75 = 0.125; L2 (0.25 + 0.5)/2 - 0.25 = 0.125
    assert s["gain_40_to_50"] == pytest.approx({"L1": 0.125, "L2": 0.125})
    assert s["level_order"] == {"4/255": "L1 > L2", "8/255": "L1 > L2"} and s["order_holds"]
    # over every setting: stds of a: 4/255@40 (0.5, 0.25), 4/255@50 (0.75, 0.5), 8/255@40 0, 8/255@50 (1, .75)
    a_std = np.std([0.5, 0.25], ddof=1)
    assert s["median_std_all"] == pytest.approx(np.median([a_std, a_std, 0, a_std, 0, np.std([.25, 0], ddof=1),
                                                           0, np.std([.25, .5], ddof=1)]))


def test_bootstrap_over_models_is_seeded_and_brackets_the_point():
    groups = [np.array([[1], [0], [1], [1]]), np.array([[0], [0], [1]])]
    a = bootstrap_groups(groups, lambda g: float(g.mean()), n_boot=500, seed=3)
    assert a == bootstrap_groups(groups, lambda g: float(g.mean()), n_boot=500, seed=3)
    assert a[1] <= a[0] <= a[2] and a[0] == pytest.approx((0.75 + 1 / 3) / 2)
