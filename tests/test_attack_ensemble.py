"""The strong preset as AutoAttack composes it: members in turn on what earlier ones left, the gradient-free Square
attack last, and the gradient-masking check it makes possible."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mmaudit.data.loaders import make_sample
from mmaudit.models.vlm import AnswerScores
from mmaudit.pathways.pixel import EndPGD
from mmaudit.pathways.pixel.end_pgd import dlr
from mmaudit.pathways.pixel.square import HALVINGS, Square, p_at

THRESHOLD = 2 / 255  # the toy answers "yes" once its (quantised) image is this much brighter than mid-grey


class MaskedToy:
    """A yes/no 'VLM' whose answer is the quantised image's mean brightness: its quantising step (torch.round)
    has zero gradient everywhere, so every gradient attack is blind, while the answer still moves with the image."""

    name, level = "toy-masked", "L1"
    device, dtype = torch.device("cpu"), torch.float32
    vocab = {"no": 0, "yes": 1}

    @property
    def fingerprint(self) -> str:
        return "toy-masked-1"

    def settings(self) -> dict:
        return {}

    # the rest of the white-box protocol: nothing of it is asked by an End-PGD-only audit without layer recovery
    decoder_layers: list = []

    def _unused(self, *args, **kwargs):
        raise NotImplementedError("the masked toy has no vision tower or layers")

    vision_features = image_positions = patch_grid = attentions = generate_patched = hidden_states = _unused

    def _brightness(self, images) -> torch.Tensor:
        means = [torch.round(im * 255 / 4).mul(4 / 255).mean() for im in images]  # torch.round: zero gradient
        return torch.stack(means) - 128 / 255

    def generate(self, images, prompts, max_new_tokens=16):
        return ["yes" if b > THRESHOLD else "no" for b in self._brightness(images).tolist()]

    def answer_tokens(self, answer: str) -> list[int]:
        return [self.vocab[answer.strip().lower()]]

    def score(self, images, prompts, answers) -> AnswerScores:
        b = self._brightness(images)
        logits = torch.stack([torch.zeros_like(b), 255 * (b - THRESHOLD)], -1)[:, None, :]
        targets = torch.tensor([self.answer_tokens(a) for a in answers])
        return AnswerScores(logits, targets, torch.ones_like(targets, dtype=torch.bool))


def grey_samples(n: int) -> list:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):  # mid-grey with zero-mean texture: mean brightness exactly 128
        tex = rng.integers(-20, 21, (16, 16, 1))
        image = np.clip(128 + np.concatenate([tex, -tex], 0), 0, 255).repeat(3, -1).astype(np.uint8)
        out.append(make_sample(f"grey-{i}", image, f"Is picture {i} bright?", "no", "synthetic"))
    return out


def test_square_flips_what_masked_gradients_hide_and_the_records_say_which_member_did():
    vlm, samples = MaskedToy(), grey_samples(4)
    assert vlm.generate([torch.tensor(s.image).permute(2, 0, 1) / 255 for s in samples], [""] * 4) == ["no"] * 4
    atk = EndPGD(eps=8 / 255, steps=20, optimiser="apgd", members=("ce", "dlr", "square:1000"))
    res = atk(vlm, samples)
    # every gradient member sees a zero gradient and leaves the image where it started: nothing flips ...
    for name in ("ce", "dlr"):
        alone = atk.member(name)(vlm, samples)
        assert not any(alone.flipped)
    # ... while Square, reading only the loss, flips every question, within the ball
    assert all(res.flipped) and res.member == ["square:1000"] * 4
    assert all(li <= 8 / 255 + 1e-9 for li in res.linf)
    for mp, passes in zip(res.member_passes, res.passes):
        assert set(mp) == {"ce", "dlr", "square:1000"} and sum(mp.values()) == passes
        assert mp["ce"] == mp["dlr"] == 21  # 20 steps and the final check: none flipped early


def test_a_sample_flipped_by_an_early_member_never_reaches_the_later_ones():
    vlm, samples = MaskedToy(), grey_samples(3)
    res = EndPGD(eps=8 / 255, steps=5, optimiser="apgd", members=("square:1000", "ce"))(vlm, samples)
    assert all(res.flipped) and res.member == ["square:1000"] * 3
    assert [list(mp) for mp in res.member_passes] == [["square:1000"]] * 3  # ce never ran
    assert all(mp["square:1000"] == p < 1001 for mp, p in zip(res.member_passes, res.passes))  # stopped early


class SmoothToy(MaskedToy):
    """The masked toy without its quantising step: a smooth loss APGD climbs, and a threshold it never reaches
    within the ball, so every run takes all its steps."""

    def _brightness(self, images) -> torch.Tensor:
        return torch.stack([im.mean() for im in images]) - 128 / 255 - 1.0


def test_a_member_run_on_a_longer_schedule_is_exactly_that_runs_first_steps(monkeypatch):
    """``dlr:40@100``: 40 steps of the 100-step APGD schedule take exactly the first 40 iterates of the 100-step
    run (same start, same step sizes), while a plain 40-step run halves its step size on its own, earlier
    checkpoints."""
    import mmaudit.pathways.pixel.base as base

    trace: list[tuple[float, torch.Tensor]] = []

    class Spy(base.APGD):
        def update(self, st, x, grad, loss, project):
            trace.append((st.eta, x.clone()))
            return super().update(st, x, grad, loss, project)

    monkeypatch.setattr(base, "APGD", Spy)
    vlm, samples = SmoothToy(), grey_samples(1)
    runs = {}
    for name, atk in {"100": EndPGD(eps=8 / 255, steps=100, optimiser="apgd", loss="dlr"),
                      "40@100": EndPGD(eps=8 / 255, steps=40, optimiser="apgd", loss="dlr", schedule=100),
                      "40": EndPGD(eps=8 / 255, steps=40, optimiser="apgd", loss="dlr")}.items():
        trace.clear()
        assert not any(atk(vlm, samples).flipped)
        runs[name] = list(trace)
    assert len(runs["100"]) == 100 and len(runs["40@100"]) == len(runs["40"]) == 40
    assert all(e1 == e2 and torch.equal(x1, x2) for (e1, x1), (e2, x2) in zip(runs["100"], runs["40@100"]))
    assert [e for e, _ in runs["40"]] != [e for e, _ in runs["40@100"]]  # its own schedule: another run
    member = EndPGD(steps=100, optimiser="apgd", members=("ce", "dlr:40x3@100")).member("dlr:40x3@100")
    assert (member.steps, member.restarts, member.schedule, member.loss) == (40, 3, 100, "dlr")
    with pytest.raises(ValueError, match="schedule .* needs optimiser apgd and at least the 40 steps"):
        EndPGD(steps=100, optimiser="apgd", members=("dlr:40@30",))
    assert EndPGD(steps=40, optimiser="apgd", schedule=100, members=("ce", "square:9")).member("square:9").schedule \
        is None  # Square has no APGD schedule to inherit
    assert "schedule" not in EndPGD(steps=100, optimiser="apgd").params()  # unset: keys as before


def test_square_schedule_and_stripes_by_hand():
    # the window's fraction halves at the paper's iterations, read on a 10,000-query scale
    assert p_at(0, 10_000, 0.8) == 0.8 and p_at(10, 10_000, 0.8) == 0.8 and p_at(11, 10_000, 0.8) == 0.4
    assert p_at(51, 10_000, 0.8) == 0.2 and p_at(9_999, 10_000, 0.8) == 0.8 / 2 ** len(HALVINGS)
    assert p_at(2, 100, 0.8) == 0.2  # a run of 100 queries: query 2 is iteration 200 of 10,000, past 10 and 50
    stripes = Square.start((3, 4, 5), 2 / 255, seed=1)
    assert torch.allclose(stripes.abs(), torch.full((3, 4, 5), 2 / 255))
    assert torch.equal(stripes, stripes[:, :1, :].expand(3, 4, 5))  # one sign per channel and column


def test_dlr_by_hand():
    # one answer of two tokens; vocabulary of four
    logits = torch.tensor([[[4.0, 1.0, 0.0, -1.0], [0.0, 3.0, 2.0, 0.5]]])
    targets = torch.tensor([[0, 2]])
    mask = torch.tensor([[True, True]])
    # position 0: (1 - 4) / (4 - 0) = -0.75; position 1: reference 2 loses to 3: (3 - 2) / (3 - 0.5) = 0.4
    assert dlr(logits, targets, mask).item() == pytest.approx(0.4)
    assert dlr(logits, targets, torch.tensor([[True, False]])).item() == pytest.approx(-0.75)


def test_an_ensemble_member_must_be_one_of_the_attacks_objectives_or_square():
    with pytest.raises(ValueError, match="use one of ce, margin, dlr, square"):
        EndPGD(members=("cosine",))
    for bad in ("square:abc", "ce:0", "ce:x0", "ce:5x"):
        with pytest.raises(ValueError, match="positive whole numbers"):
            EndPGD(members=(bad,))
    with pytest.raises(ValueError, match="name one member twice"):
        EndPGD(members=("ce", "dlr", "ce"))
    atk = EndPGD(steps=40, restarts=2, members=("margin:7", "ce:x3", "dlr:9x4", "square"))
    m = atk.member("margin:7")
    assert (m.steps, m.restarts, m.loss, m.members) == (7, 2, "margin", ())
    assert (atk.member("ce:x3").steps, atk.member("ce:x3").restarts) == (40, 3)
    assert (atk.member("dlr:9x4").steps, atk.member("dlr:9x4").restarts) == (9, 4)
    sq = atk.member("square")
    assert (sq.optimiser, sq.steps, sq.restarts, sq.members) == ("square", 400, 1, ())


def test_the_masking_check_warns_in_the_summary_the_headline_and_the_terminal(tmp_path, capsys):
    import mmaudit
    from mmaudit.cli.audit import print_summary

    run = tmp_path / "run"
    result = mmaudit.audit(MaskedToy(), grey_samples(3), out=run, attacks="end_pgd", strength="strong",
                           steps=10, attack_options={"end_pgd": {"members": "ce+square:1000"}}, recovery=0,
                           ocr_limit=0, n_boot=200)
    summary = json.loads((run / "summary.json").read_text())
    (m,) = summary["masking"]["models"]
    assert (m["model"], m["square_only"], m["gradient"]) == ("toy-masked", 3, 0)
    assert any("Square (gradient-free) flipped 3 questions" in w for w in result.warnings)
    assert any(s.startswith("Gradient masking:") for s in summary["headline"]["sentences"])
    assert "Gradient masking" in (run / "report.md").read_text()
    assert "masking-warning" in (run / "report.html").read_text()
    rows = {r["member"]: r for r in summary["members"]}
    assert (rows["ce"]["reached"], rows["ce"]["flipped"]) == (3, 0)
    assert (rows["square:1000"]["reached"], rows["square:1000"]["flipped"]) == (3, 3)
    capsys.readouterr()
    print_summary(run)
    assert "every gradient attack left" in capsys.readouterr().out


def test_compare_says_which_member_flipped_what_only_the_stronger_run_flipped(tmp_path):
    import mmaudit
    from mmaudit.report.compare import compare_runs

    common = {"attacks": "end_pgd", "recovery": 0, "ocr_limit": 0, "n_boot": 100}
    mmaudit.audit(MaskedToy(), grey_samples(3), out=tmp_path / "paper", **common)
    mmaudit.audit(MaskedToy(), grey_samples(3), out=tmp_path / "strong", strength="strong", steps=5,
                  attack_options={"end_pgd": {"members": "ce+dlr+square:1000"}}, **common)
    (d,) = compare_runs([tmp_path / "paper", tmp_path / "strong"], tmp_path / "cmp", n_boot=100)["paired"]
    assert (d["only_run"], d["only_reference"]) == (3, 0)
    assert d["only_run_by_member"] == {"End-PGD square:1000": 3}
    assert "3 of 3 (End-PGD square:1000 3)" in (tmp_path / "cmp" / "compare.md").read_text()


def brightness_endpoint(body: dict):
    """A scripted deployed VLM: the toy's rule on the PNG it is sent, and the reply's log-probability (the capability
    probes' text requests get a JSON yes)."""
    import base64
    import io

    from PIL import Image

    content = body["messages"][0]["content"]
    if isinstance(content, str) or not any(p["type"] == "image_url" for p in content):
        return '{"answer": "yes"}'
    url = next(p["image_url"]["url"] for p in content if p["type"] == "image_url")
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as im:
        image = torch.tensor(np.asarray(im.convert("RGB"))).permute(2, 0, 1) / 255
    (b,) = MaskedToy()._brightness([image]).tolist()
    margin = 255 * (b - THRESHOLD)  # the toy's logit of "yes" against "no"
    reply = "yes" if margin > 0 else "no"
    return reply, [-math.log1p(math.exp(-abs(margin)))]  # log p of the greedy token


def test_square_audits_a_black_box_endpoint_by_its_log_probabilities_counted_in_requests(tmp_path):
    import mmaudit
    from mmaudit.models.chat.local_server import LocalChatServer

    with LocalChatServer(answer=brightness_endpoint) as server:
        spec = f"endpoint:bright@{server.base_url}"
        result = mmaudit.audit(spec, grey_samples(3), out=tmp_path / "run", attacks="end_pgd,square",
                               attack_options={"square": {"steps": 1000}}, recovery=0, ocr_limit=0, n_boot=100,
                               no_canary=True)
        sent = [b for b in server.bodies if b.get("logprobs")]
    (row,) = result.models
    assert math.isnan(row.asr["end_pgd"])  # gradients: not applicable on an endpoint
    assert row.asr["square"] == 1.0 and row.r_plus == 1.0
    recs = [r for r in result.records() if r["attack"] == "square"]
    assert all(r["flipped"] and 1 <= r["passes"] <= 1000 for r in recs)
    # every query was one request asking for log-probabilities (the verification of a flip asks for none)
    assert sum(r["passes"] for r in recs) == len(sent)


def test_square_on_an_endpoint_without_log_probabilities_says_so(tmp_path):
    import mmaudit
    from mmaudit.errors import UsageError
    from mmaudit.models.chat.local_server import LocalChatServer

    def no_logprobs(body):
        got = brightness_endpoint(body)
        return got[0] if isinstance(got, tuple) else got

    with LocalChatServer(answer=no_logprobs) as server, pytest.raises(UsageError, match="no token log-probabilities"):
        mmaudit.audit(f"endpoint:plain@{server.base_url}", grey_samples(1), out=tmp_path / "run", attacks="square",
                      recovery=0, ocr_limit=0, n_boot=100, no_canary=True)


def test_output_diversified_starts_land_on_the_corner_the_random_output_direction_picks():
    """ODI by hand on the smooth toy: its one live logit is 255 x (mean brightness - threshold), so w . outputs has
    the gradient w_yes x 255 / (pixels) on every pixel and a signed step of eps moves every pixel the same way.
    Two such steps from any start in the ball end exactly on its corner, +eps or -eps everywhere (the first may stop
    at the ball's edge, the second clips there): each start is sent to the side its own random w_yes picks."""
    vlm, samples = SmoothToy(), grey_samples(8)
    clean = [torch.tensor(s.image, dtype=torch.int16) for s in samples]
    atk = EndPGD(eps=8 / 255, steps=0, odi=2)  # no attack step: the image is where ODI left it
    res = atk(vlm, samples)
    moves = [torch.tensor(a, dtype=torch.int16) - c for a, c in zip(res.adv_uint8, clean)]
    sides = [int(m.flatten()[0]) for m in moves]
    assert all(torch.all(m == side) for m, side in zip(moves, sides)) and set(sides) == {8, -8}
    assert res.passes == [3] * 8  # two ODI steps and the final check
    # a start's direction is its own stream's: alone or in a batch a sample lands where it did, another seed elsewhere
    alone = atk(vlm, samples[3:4])
    assert np.array_equal(alone.adv_uint8[0], res.adv_uint8[3])
    again = EndPGD(eps=8 / 255, steps=0, odi=2, seed=1)(vlm, samples)
    assert [int(a[0, 0, 0]) - int(c[0, 0, 0]) for a, c in zip(again.adv_uint8, clean)] != sides
    # without ODI a random start stays inside the ball, off its corners
    plain = EndPGD(eps=8 / 255, steps=0)(vlm, samples)
    assert not any(torch.all((torch.tensor(a, dtype=torch.int16) - c).abs() == 8)
                   for a, c in zip(plain.adv_uint8, clean))


def test_odi_is_a_gradient_start_square_never_takes_and_the_strong_preset_sets():
    from mmaudit.audit.config import attack_params, make_attack
    from mmaudit.cli.options import AuditOptions
    from mmaudit.pathways.pixel.surrogate import SurrogateEnsemble

    with pytest.raises(ValueError, match="odi"):
        EndPGD(optimiser="square", odi=2)
    with pytest.raises(ValueError, match="transfer attack never asks its target"):
        SurrogateEnsemble(odi=1)
    atk = EndPGD(steps=100, optimiser="apgd", odi=2, members=("ce", "dlr", "square:50"))
    assert atk.member("dlr").odi == 2 and atk.member("square:50").odi == 0
    strong = AuditOptions(strength="strong").audit_config()
    assert make_attack("end_pgd", strong).odi == 2 == attack_params("end_pgd", strong)["odi"]
    for name in ("vis_pgd", "mantis"):  # not measured with ODI: their strong keys as before
        assert make_attack(name, strong).odi == 0 and "odi" not in attack_params(name, strong)
    assert "odi" not in attack_params("end_pgd", AuditOptions().audit_config())  # the paper's keys as before


@pytest.mark.parametrize("attack", ["end_pgd", "vis_pgd", "mantis"])
def test_odi_on_a_real_model_steps_whole_eps_along_its_own_output_direction(zoo, attack):
    """On the zoo's L1 model, through each attack's own outputs (answer logits; Vis-PGD: encoder features): two
    signed ODI steps of eps from the clean image leave every pixel at -eps, 0 or +eps (0 where the second step's
    gradient turned back: the model is not linear), most of them moved, and a different seed's direction lands
    elsewhere."""
    from mmaudit.data.render import SIZE  # the zoo's input size: no resize, so every pixel has a gradient
    from mmaudit.pathways import registry

    vlm, cls = zoo["L1"], registry.spec(attack).cls
    sample = make_sample("odi-0", np.random.default_rng(1).integers(40, 216, (SIZE, SIZE, 3)).astype(np.uint8),
                         "What colour is it?", "red", "synthetic")
    runs = [cls(eps=8 / 255, steps=0, odi=2, random_start=False, seed=seed)(vlm, [sample]) for seed in (0, 1)]
    moves = [torch.tensor(r.adv_uint8[0], dtype=torch.int16) - torch.tensor(sample.image, dtype=torch.int16)
             for r in runs]
    for m in moves:  # the pixels' range (40..215) leaves room: no clipping at the image's bounds
        assert set(m.unique().tolist()) == {-8, 0, 8} and (m != 0).float().mean() > 0.3
    assert (moves[0] != moves[1]).float().mean() > 0.3
    assert runs[0].passes == [3]
