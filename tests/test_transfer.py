"""`mmaudit audit transfer`: the source x target matrix over a run's models, an endpoint target shown the run's
adversarial images, and the black-box R+ checked on a hand-built store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.images import load_rgb
from mmaudit.models.chat.local_server import LocalChatServer
from mmaudit.report.transfer import transfer_summary
from mmaudit.store import RunStore, key_of
from scripted_vlm import IDS, ScriptedVLM, digest, fixed_canary, sent, work  # noqa: F401 (fixed_canary: autouse)


def invoke(*args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def zoo_audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    invoke("audit", "--model", "zoo:L1", "--model", "zoo:L2", "--data", "synthetic:2", "--attacks",
           "end_pgd,mantis,typo_evid,nat_evid", "--steps", "5", "--n-boot", "200", "--recovery", "0", "--ocr-limit",
           "0", "--wrong-ocr", "off", "--out", str(out))
    return out


@pytest.fixture
def zoo_run(zoo_audit, tmp_path):
    """A test's own copy of the audited run: what one test's transfer adds (an endpoint target) never reaches
    another's, in any order."""
    import shutil

    return Path(shutil.copytree(zoo_audit, tmp_path / "run"))


def test_the_matrix_of_a_two_model_run_has_the_white_box_asr_on_its_diagonal(zoo_run):
    res = invoke("audit", "transfer", str(zoo_run))
    summary = json.loads((zoo_run / "summary.json").read_text())
    t = summary["transfer"]
    asr = {m["model"]: m["asr"] for m in summary["models"]}
    cells = {(c["source"], c["attack"], c["target"]): c for c in t["matrix"]}
    assert len(cells) == 2 * 2 * 2  # sources x pixel attacks x targets
    for (source, attack, target), c in cells.items():
        assert c["diagonal"] == (source == target)
        if c["diagonal"]:  # the saved images re-asked give exactly the verified white-box flips
            assert c["asr"][0] == pytest.approx(asr[target][attack]) and c["n"] == summary["models"][
                [m["model"] for m in summary["models"]].index(target)]["n_correct"]
    # black-box R+ excludes a target's own images: it is the union of its text attacks and the other's transfers
    store = RunStore(zoo_run / "results.jsonl")
    for row in t["targets"]:
        fp = row["fingerprint"]
        c_set = {r["sample"] for r in store.records("clean") if r["fingerprint"] == fp and r["correct"]}
        flipped = {r["sample"] for r in store.records("attack") if r["fingerprint"] == fp and r["flipped"]
                   and r["attack"] in ("typo_evid", "nat_evid")}
        flipped |= {r["sample"] for r in store.records("transfer") if r["fingerprint"] == fp and r["flipped"]
                    and r["source_fingerprint"] != fp}
        assert row["r_plus_black_box"][0] == pytest.approx(len(flipped & c_set) / len(c_set))
        assert row["r_plus_white_box"][0] == pytest.approx(
            next(m["r_plus"] for m in summary["models"] if m["model"] == row["target"]))
    said = " ".join(res.output.split())
    assert "Transfer ASR" in said and "(white-box)" in said and "Black-box residual risk" in said
    page = (zoo_run / "report.html").read_text()
    assert '<section id="transfer">' in page and "Rows: source model and pixel attack" in page  # the heat map
    assert "Transferred images that flipped a target" in page
    assert "Black-box residual risk" in (zoo_run / "report.md").read_text()
    # a rerun asks nothing again
    before = len(list(store.records("transfer")))
    invoke("audit", "transfer", str(zoo_run))
    assert len(list(RunStore(zoo_run / "results.jsonl").records("transfer"))) == before


def test_an_endpoint_target_is_shown_every_adversarial_image_and_flips_as_scripted(zoo_run, tmp_path):
    store = RunStore(zoo_run / "results.jsonl")
    adv = {}  # digest of a saved adversarial image -> (source model, attack, sample)
    for r in store.records("attack"):
        if r["attack"] in ("end_pgd", "mantis"):
            adv[digest(load_rgb(zoo_run / r["image"], r["image"])[0])] = (r["model"], r["attack"], r["sample"])
    vlm = ScriptedVLM(typo_flips=[IDS[2]])
    chosen = {("zoo-L1", "end_pgd", IDS[0]), ("zoo-L2", "mantis", IDS[1])}  # the images the endpoint falls for

    def answer(body):
        image = sent(body)[0] if vlm.what(body)[0] == "unknown" else None
        if image in adv:
            model, attack, sample = adv[image]
            return "wrong on purpose" if (model, attack, sample) in chosen else vlm.samples[sample].answer
        return vlm(body)

    with LocalChatServer(answer=answer) as server:
        invoke("audit", "transfer", str(zoo_run), "--to", f"endpoint:scripted@{server.base_url}")
        calls = sum(work(server).values())
        invoke("audit", "transfer", str(zoo_run), "--to", f"endpoint:scripted@{server.base_url}")
        assert sum(work(server).values()) == calls  # the rerun sent nothing but the probe
    summary = json.loads((zoo_run / "summary.json").read_text())
    t = summary["transfer"]
    (row,) = [r for r in t["targets"] if r["target"] == "endpoint-scripted"]
    # C: all six; typo flips one; transfer flips two others (where the source saved an image for that sample)
    shown = {(m, a, s) for m, a, s in adv.values()}
    expected = {IDS[2]} | {s for m, a, s in chosen if (m, a, s) in shown}
    assert row["n_correct"] == 6 and row["r_plus_black_box"][0] == pytest.approx(len(expected) / 6)
    assert row["text_direct"][0] == pytest.approx(1 / 6) and row["r_plus_white_box"] is None
    (model,) = [m for m in summary["models"] if m["model"] == "endpoint-scripted"]
    assert model["not_run"]["end_pgd"] == "black-box target: no gradients"
    for c in t["matrix"]:
        if c["target"] == "endpoint-scripted":
            want = sum((c["source"], c["attack"], s) in chosen for s in IDS if (c["source"], c["attack"], s) in shown)
            assert c["flips"] == want and c["n"] == sum((c["source"], c["attack"], s) in shown for s in IDS)


def _hand_store(path, n_q: int, correct: list[int], typo: list[int], transfers: dict[str, tuple[list[int], list[int]]]):
    """A target T over questions q00..: clean-correct ``correct``, Typo-Evid flips ``typo``; per transferred attack,
    (questions with a source image, questions it flips)."""
    store = RunStore(path)
    params = {a: {"name": a} for a in ("typo_evid", *transfers)}
    rec = {"model": "T", "level": "API", "fingerprint": "fpT"}
    for q in range(n_q):
        sid = f"q{q:02d}"
        store.put({"kind": "clean", "key": key_of(c=sid), **rec, "sample": sid, "correct": q in correct})
        if q in correct:
            store.put({"kind": "attack", "key": key_of(a=sid), **rec, "sample": sid, "attack": "typo_evid",
                       "params": params["typo_evid"], "flipped": q in typo, "passes": 0})
        for attack, (has, flips) in transfers.items():
            if q in has and q in correct:
                store.put({"kind": "transfer", "key": key_of(t=sid, a=attack), **rec, "sample": sid,
                           "source": "S", "source_fingerprint": "fpS", "attack": attack, "params": params[attack],
                           "image": f"adv/{attack}/{sid}.png", "reference": "1", "answer": "2",
                           "flipped": q in flips})
    return store, params


def test_transfer_asr_and_black_box_r_plus_by_hand(tmp_path):
    # 10 questions; C = {0..7} (8); typo flips {0}; End-PGD images for {0..5, 8} flip {1, 2};
    # MANTIS images for {4..7} flip {2, 6}
    store, params = _hand_store(tmp_path / "s.jsonl", 10, list(range(8)), [0],
                                {"end_pgd": ([0, 1, 2, 3, 4, 5, 8], [1, 2]), "mantis": ([4, 5, 6, 7], [2, 6])})
    t = transfer_summary(store, params, n_boot=4000, seed=0)
    cells = {c["attack"]: c for c in t["matrix"]}
    assert cells["end_pgd"]["n"] == 6 and cells["end_pgd"]["asr"][0] == pytest.approx(2 / 6)  # q8 is out of C
    assert cells["mantis"]["n"] == 4 and cells["mantis"]["asr"][0] == pytest.approx(1 / 4)  # q2 has no MANTIS image
    (row,) = t["targets"]
    # union {0} | {1, 2} | {6} over C of 8
    assert row["r_plus_black_box"][0] == pytest.approx(4 / 8) and row["text_direct"][0] == pytest.approx(1 / 8)
    # the CI is the question bootstrap of R+ (a ratio over resampled questions): scipy's percentile bootstrap,
    # an independent implementation, agrees to its Monte Carlo error
    union = np.isin(np.arange(10), [0, 1, 2, 6]).astype(float)
    correct = np.isin(np.arange(10), range(8)).astype(float)
    ref = sps.bootstrap((union, correct), lambda u, c: u.sum() / c.sum(), paired=True, vectorized=False,
                        method="percentile", n_resamples=4000, random_state=1).confidence_interval
    assert row["r_plus_black_box"][1] == pytest.approx(ref.low, abs=0.07)
    assert row["r_plus_black_box"][2] == pytest.approx(ref.high, abs=0.07)


def test_every_c_question_flipped_has_a_degenerate_interval(tmp_path):
    store, params = _hand_store(tmp_path / "s.jsonl", 6, [0, 1, 2, 3], [0, 1], {"end_pgd": ([2, 3], [2, 3])})
    (row,) = transfer_summary(store, params, n_boot=500, seed=0)["targets"]
    assert row["r_plus_black_box"] == [1.0, 1.0, 1.0]
