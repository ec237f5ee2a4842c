"""A deployed VLM behind an OpenAI-compatible endpoint as an audit target, and transfer across models.

The endpoint is the local test server scripted as a VLM: it decodes the PNG it was sent and answers by what the
image is (a clean image, a Typo-Evid or Nat-Evid edit of a chosen sample, a masked edit), so every number the
audit reports can be predicted by hand from the script.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.synthetic import READING_PROMPT
from mmaudit.models.chat.local_server import LocalChatServer
from scripted_vlm import DATA, IDS, ScriptedVLM, fixed_canary, sent, work  # noqa: F401 (fixed_canary: autouse)


def audit(server, out, *extra):
    res = CliRunner().invoke(app, ["audit", "--model", f"endpoint:scripted-vlm@{server.base_url}", "--data", DATA,
                                   "--n-boot", "200", "--ocr-limit", "0", "--wrong-ocr", "off", "--out", str(out),
                                   *extra])
    assert res.exit_code == 0, res.output
    return res, json.loads((out / "summary.json").read_text())


def test_an_endpoint_target_gives_exactly_what_its_script_says_and_a_rerun_pays_nothing(tmp_path):
    a, b, wrong = IDS[0], IDS[1], IDS[5]
    vlm = ScriptedVLM(clean_wrong=[wrong], typo_flips=[a], nat_flips=[a, b], restores=[b],
                      reads=[("typo_evid", a), ("nat_evid", a), ("nat_evid", b)])
    with LocalChatServer(answer=vlm) as server:
        res, summary = audit(server, tmp_path)
        (row,) = summary["models"]
        # C: five of six (one answered wrong on its clean image)
        assert row["level"] == "API" and row["n_correct"] == 5 and row["clean_acc"] == pytest.approx(5 / 6)
        assert row["asr"]["typo_evid"] == pytest.approx(1 / 5) and row["asr"]["nat_evid"] == pytest.approx(2 / 5)
        for pixel in ("vis_pgd", "end_pgd", "mantis"):  # not applicable: null, never 0
            assert row["asr"][pixel] is None and row["not_run"][pixel] == "black-box target: no gradients"
        assert row["r0"] == pytest.approx(1 / 5) and row["r_plus"] == pytest.approx(2 / 5)
        assert row["delta"]["nat_evid"] == pytest.approx(1 / 5) and row["delta"]["mantis"] is None
        said = " ".join(res.output.split())
        assert "n/a (black-box target: no gradients)" in said and "Not applicable" in said
        # RUG: typo read on a only (1/5), used on a; Nat read on a and b (2/5), used on both
        (typo,) = summary["text"]["typo_evid"]["rug"]["models"]
        (nat,) = summary["text"]["nat_evid"]["rug"]["models"]
        assert typo["p_read"] == pytest.approx(1 / 5) and typo["p_use"] == pytest.approx(1 / 5)
        assert nat["p_read"] == pytest.approx(2 / 5) and nat["p_use"] == pytest.approx(2 / 5)
        assert summary["text"]["nat_evid"]["oar"]["models"] == []  # no attention from a black box
        (mask,) = summary["text"]["nat_evid"]["mask_restored"]["models"]
        assert mask["n"] == 2 and mask["rate"] == pytest.approx(1 / 2)  # masking restores b, not a
        assert summary["errors"] == []
        calls = sum(work(server).values())
        assert calls and max(work(server).values()) == 1
        # a rerun sends nothing but the endpoint probe: every request is in the run's cache, every unit in the store
        audit(server, tmp_path)
        assert sum(work(server).values()) == calls
        # the same requests in a fresh store still come from calls.jsonl: delete results, keep the cache
        (tmp_path / "results.jsonl").unlink()
        _, again = audit(server, tmp_path)
        assert sum(work(server).values()) == calls and again["models"][0]["asr"] == row["asr"]
    run_end = [json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()
               if '"run_end"' in ln][-1]
    (usage,) = run_end["endpoint_usage"].values()
    assert usage["calls"] == 0 and usage["cached"] > 0
    page = (tmp_path / "report.html").read_text()
    assert "endpoint-scripted-vlm" in page and "n/a (black-box target: no gradients)" in page


def test_hostile_replies_are_per_sample_errors_and_a_failed_clean_request_leaves_c(tmp_path):
    vlm = ScriptedVLM()
    fail_clean, empty_clean, refuse, malformed = IDS[0], IDS[1], IDS[2], IDS[3]

    what = vlm.what

    def answer(body):
        kind, sid = what(body)
        if (kind, sid) == ("clean", empty_clean):
            return ""
        if (kind, sid) == ("typo_evid", refuse) and sent(body)[1] != READING_PROMPT:
            return "I'm sorry, but I can't help with that."
        return vlm(body)

    with LocalChatServer(answer=answer, reject=lambda b: 400 if what(b) == ("clean", fail_clean) else None,
                         raw_reply=lambda b: ("application/json", b'{"result": "42"}')
                         if what(b) == ("nat_evid", malformed) and sent(b)[1] != READING_PROMPT else None) as server:
        res, summary = audit(server, tmp_path)
    (row,) = summary["models"]
    assert row["n_correct"] == 4  # the failed and the empty clean replies are not answers
    errors = {(e["sample"], e["field"].split(" reply ")[1]): e["reason"] for e in summary["errors"]}
    assert errors[(fail_clean, "(clean)")].startswith("request failed: HTTP 400") and "out of C" in errors[
        (fail_clean, "(clean)")]
    assert errors[(empty_clean, "(clean)")] == "empty reply"
    assert errors[(refuse, "(typo_evid)")].startswith("answer: refusal")
    assert "malformed reply" in errors[(malformed, "(nat_evid)")]
    # the refusal is an answer that is not the reference: a flip; the malformed reply is no answer: no flip
    assert row["asr"]["typo_evid"] == pytest.approx(1 / 4) and row["asr"]["nat_evid"] == 0.0
    assert "errors (samples that could not be audited, replies that were no answer)" in " ".join(res.output.split())
    page = (tmp_path / "report.html").read_text()
    assert "malformed reply" in page and "refusal" in page


def test_bad_endpoint_specs_are_one_line_errors(tmp_path):
    for spec, words in [("endpoint:gpt", "write endpoint:MODEL@URL"), ("endpoint:@http://x/v1", "MODEL@URL")]:
        res = CliRunner().invoke(app, ["audit", "--model", spec, "--out", str(tmp_path / "r")])
        assert res.exit_code == 2 and words in res.output and not (tmp_path / "r").exists()
    res = CliRunner().invoke(app, ["audit", "sweep", "--model", "endpoint:m@http://127.0.0.1:9/v1", "--out",
                                   str(tmp_path / "s")])
    assert res.exit_code == 2 and "needs gradients" in res.output
