"""`bench run` against a recording OpenAI-compatible server: pixels reach Full-MM and nothing else, the judge's
trusted evidence, Parametric per row, one bad request, usage, cost and budget, the release files; G.4 and G.10."""

import base64
import hashlib
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from mmaudit.models.chat.probe import PROBE_PROMPT
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.run import load_rows, run_bench

pytest.importorskip("openai")

from typer.testing import CliRunner  # noqa: E402

from mmaudit.cli import app  # noqa: E402
from mmaudit.models.chat import image_parts, text_content  # noqa: E402
from mmaudit.models.chat.endpoint import OpenAIChat  # noqa: E402
from mmaudit.models.chat.local_server import LocalChatServer  # noqa: E402

FULL_MM = re.compile(r"IMAGE EVIDENCE METADATA:\nTitle: \S")  # only Full-MM's image fields are not blank


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    build_benchmark(mini_inputs()[:2], folder, BuildConfig(patch_steps=3, style_steps=3))
    return folder


def pixels_of(url: str) -> str:
    data = base64.b64decode(url.split(",", 1)[1])
    return hashlib.sha256(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).tobytes()).hexdigest()


def test_full_mm_sends_pixels_and_nothing_else_does(mini, tmp_path):
    rows = load_rows(mini)
    with LocalChatServer() as srv:
        chat = OpenAIChat("vlm", base_url=srv.base_url, cache=tmp_path / "calls.jsonl", concurrency=8)
        s = run_bench(mini, chat, tmp_path, cfg=BenchConfig(stack="v", vision=True, image_size=64))
    bodies = [b for b in srv.bodies]
    content = [b["messages"][-1]["content"] for b in bodies]
    with_images = [c for c in content if image_parts(c)]
    assert with_images and all(FULL_MM.search(text_content(c)) for c in with_images)
    assert not any(image_parts(c) for c in content if not FULL_MM.search(text_content(c)))  # gates, resolver, judge
    assert s["images_sent"] == len(rows) and s["full_mm_input"] == "pixels"
    for qid in {r.qid for r in rows}:
        mine = [r for r in rows if r.qid == qid]
        variants = set()
        for r in mine:
            with Image.open(mini / r.image_evidence.local_path) as im:
                variants.add(hashlib.sha256(np.asarray(im.convert("RGB")).tobytes()).hexdigest())
        sent = {image_parts(c)[0] for c in with_images if mine[0].question in text_content(c)}
        assert len(sent) == len(variants) >= 6  # one image per distinct pixel variant of the question
        by_regime = {r.regime: r for r in mine}
        flip, clean = by_regime["TC_IP_caption_flip"], by_regime["TC_IC"]
        flip_urls = {image_parts(c)[0] for c in with_images if flip.image_evidence.alt_text in text_content(c)
                     and mine[0].question in text_content(c)}
        clean_urls = {image_parts(c)[0] for c in with_images if clean.image_evidence.alt_text in text_content(c)
                      and mine[0].question in text_content(c)}
        assert {pixels_of(u) for u in flip_urls} & {pixels_of(u) for u in clean_urls}  # caption flip: same pixels
        patch = [image_parts(c)[0] for c in with_images if mine[0].question in text_content(c)]
        assert max(Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))).size[0] for u in patch) <= 64


def test_the_judge_sees_clean_text_and_clean_image_metadata_only(mini, tmp_path):
    rows = load_rows(mini)
    with LocalChatServer() as srv:
        run_bench(mini, OpenAIChat("m", base_url=srv.base_url), tmp_path, cfg=BenchConfig(stack="j"))
    judge = [text_content(b["messages"][-1]["content"]) for b in srv.bodies
             if text_content(b["messages"][-1]["content"]).startswith("You grade factuality")]
    clean = {r.qid: r for r in rows if r.regime == "TC_IC"}
    polluted_alt = {r.image_evidence.alt_text for r in rows if r.regime.endswith("caption_flip")}
    for p in judge:
        r = next(c for c in clean.values() if c.question in p)
        im = r.image_evidence
        assert f"TRUSTED CLEAN IMAGE EVIDENCE:\nTitle: {im.title}\nAlt text / caption: {im.alt_text}" in p
        assert not im.page_url or f"Source page: {im.page_url}" in p
        assert all(t.snippet in p for t in r.text_evidence)
        assert not any(a in p for a in polluted_alt - {im.alt_text})
        assert "data:image" not in p


def test_parametric_per_row_makes_one_request_per_row(mini, tmp_path):
    rows = load_rows(mini)
    counts = {}
    for mode in ("per-row", "per-question"):
        with LocalChatServer() as srv:
            s = run_bench(mini, OpenAIChat("m", base_url=srv.base_url), tmp_path / mode,
                          cfg=BenchConfig(stack=mode, parametric=mode))
        counts[mode] = sum("TEXT EVIDENCE:\n\n" in text_content(b["messages"][-1]["content"])
                           for b in srv.bodies)
        assert s["parametric"] == mode
    assert counts == {"per-row": len(rows), "per-question": len({r.qid for r in rows})}


def test_one_bad_request_fails_its_rows_and_the_run_completes(mini, tmp_path):
    rows = load_rows(mini)
    bad = next(r for r in rows if r.regime == "TP_IP_image_blend")

    def reject(body):
        p = text_content(body["messages"][-1]["content"])
        return 400 if p.startswith("You are a retrieval trust gate") and "Decide how" in p and \
            bad.text_evidence[0].snippet in p and bad.image_evidence.alt_text in p else None

    with LocalChatServer(reject=reject) as srv:
        res = CliRunner().invoke(app, ["bench", "run", "--folder", str(mini), "--out", str(tmp_path),
                                       "--endpoint", srv.base_url, "--model", "m", "--n-boot", "50",
                                       "--price", "0.5,1.5"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    failed = summary["failed_rows"]
    assert failed["triage_gate"] >= 1 and failed["cascaded_router"] == failed["triage_gate"]
    assert failed["field_selector"] == 0 and failed["parametric"] == 0
    assert any("HTTP 400" in f for f in summary["failures"])
    u = summary["usage"]["answer_model"]
    assert u["failed"] >= 1 and u["prompt_tokens"] > 0
    assert u["cost"] == pytest.approx((u["prompt_tokens"] * 0.5 + u["completion_tokens"] * 1.5) / 1000)
    judged = [json.loads(x) for x in next((tmp_path / "evaluation" / "judged").rglob("triage_gate_*.jsonl"))
              .read_text().splitlines()]
    assert sum(bool(r.get("error")) for r in judged) == failed["triage_gate"]
    assert "Failed requests" in (tmp_path / "report.md").read_text()
    for kind in ("predictions", "choices"):
        assert list((tmp_path / "evaluation" / kind).rglob("field_selector_*.jsonl"))
    choice = json.loads(next((tmp_path / "evaluation" / "choices").rglob("soft_conductor_*.jsonl"))
                        .read_text().splitlines()[0])
    assert {"selfcheck_decision", "resolver_decision", "text_reliability", "final_decision",
            "chosen_source"} <= set(choice)


def test_budget_stops_the_run_and_a_rerun_resumes(mini, tmp_path):
    args = ["bench", "run", "--folder", str(mini), "--out", str(tmp_path), "--model", "m", "--n-boot", "20",
            "--price", "10,10"]
    with LocalChatServer() as srv:
        stopped = CliRunner().invoke(app, [*args, "--endpoint", srv.base_url, "--budget", "0.5",
                                           "--concurrency", "1"])
        assert stopped.exit_code == 3 and "rerun to resume" in stopped.output
        first = len(srv.bodies)
        done = CliRunner().invoke(app, [*args, "--endpoint", srv.base_url])
        assert done.exit_code == 0, done.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["usage"]["answer_model"]["cached"] >= first - 1  # what the stopped run paid for is reused


def test_channel_isolation_and_route_accuracy_by_hand():
    from mmaudit.rag.evaluate.tables import channel_isolation, route_accuracy

    def row(regime, score, route="", qid=1):
        return {"qid": qid, "regime": regime, "_score": score, "route": route}

    per = {"full_mm": {"d": [row("TC_IC", 1.0), row("TC_IP_blend", 0.5), row("TC_IP_patch", 0.0),
                             row("TP_IC", 0.25)]}}
    ch = channel_isolation(per)["full_mm"]
    assert ch["TC_IP"] == 0.25 and ch["image_effect"] == 0.75 and ch["text_effect"] == 0.75
    # two rows: branches score (P, T, M) = (1, 0, 0) and (0.5, 0.5, 0); a router that answers T then P
    branches = {"parametric": [1.0, 0.5], "text_only": [0.0, 0.5], "full_mm": [0.0, 0.0]}
    per = {b: {"d": [row("TC_IC", v[0]), row("TP_IC", v[1])]} for b, v in branches.items()}
    per["router"] = {"d": [row("TC_IC", 0.0, "TEXT_ONLY"), row("TP_IC", 0.5, "FALLBACK")]}
    per["composer"] = {"d": [row("TC_IC", 1.0, "COMPOSE"), row("TP_IC", 0.5, "CONSENSUS:TEXT_ONLY")]}
    ra = route_accuracy(per)
    assert ra["router"] == {"d": 0.5, "overall": 0.5}  # row 1 misses the oracle (P); row 2 ties P/T: P counts
    assert ra["composer"]["d"] == 0.5  # a composed answer is never the oracle's branch
    assert route_accuracy(per, ties="first")["composer"]["d"] == 0.0  # tie broken to Parametric: T misses
    assert "parametric" not in ra


def _component(text: str) -> str:
    for start, name in (("You are a retrieval trust gate.\nQuestion", "gate"), ("You are a source-aware", "resolver"),
                        ("You grade factuality", "judge"), ("You are a text-evidence", "text_trust"),
                        ("Answer the question", "answer")):
        if text.startswith(start):
            return name
    return "?"


def test_structured_requests_carry_a_json_schema_and_a_refusal_falls_back_once(mini, tmp_path):
    with LocalChatServer() as srv:
        s = run_bench(mini, OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "a.jsonl"), tmp_path / "a",
                      cfg=BenchConfig(stack="a"))
    names = {}
    for b in srv.bodies:
        comp = _component(text_content(b["messages"][-1]["content"]))
        fmt = b.get("response_format")
        names.setdefault(comp, set()).add(fmt["json_schema"]["name"] if fmt else None)
        if fmt:
            assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert names["answer"] == {None}  # free text: no schema
    assert names["gate"] == {"self_check", "triage"} and names["text_trust"] == {"text_trust"}
    assert names["resolver"] == {"resolver_select", "resolver_compose"} and names["judge"] == {"judge"}
    assert s["structured_output"] == "response_format json_schema"
    # the echo server's replies are not JSON: every component counts them, and each falls back as documented
    assert s["unparsed"]["judge"]["unparsed"] == s["unparsed"]["judge"]["of"] > 0
    assert s["distinct_decisions"]["field_selector"] == {"FALLBACK": s["rows"]}
    refuses = lambda body: 400 if "response_format" in body else None  # noqa: E731
    with LocalChatServer(reject=refuses) as srv:
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "b.jsonl", concurrency=1)
        s = run_bench(mini, chat, tmp_path / "b", cfg=BenchConfig(stack="b"))
    refused = [b for b in srv.bodies if "response_format" in b]
    assert len(refused) == 1 and chat.usage.schema_fallbacks == 1 and chat.schema_rejected
    assert sum(s["failed_rows"].values()) == 0 and s["structured_output"].startswith("plain prompting")


def _json_server(srv_answer):
    """Replies in each component's JSON, so the routers have real decisions to make."""
    def answer(body):
        p = text_content(body["messages"][-1]["content"])
        comp = _component(p)
        if comp == "gate":
            return json.dumps({"decision": "TRUST" if "TRUST" in p else "TEXT_ONLY", "reason": ""})
        if comp == "text_trust":
            return json.dumps({"text_reliability": "trustworthy", "reason": ""})
        if comp == "resolver":
            return json.dumps({"text_reliability": "trustworthy", "decision": "TEXT_ONLY", "final_answer": ""})
        if comp == "judge":
            return json.dumps({"label": srv_answer, "score": 1.0, "reason": ""})
        return "an answer"
    return answer


def test_cross_stack_runs_every_stack_under_one_fixed_judge(mini, tmp_path):
    with LocalChatServer(answer=_json_server("supported")) as a, \
            LocalChatServer(answer=_json_server("supported")) as b, \
            LocalChatServer(answer=_json_server("partially_supported")) as judge:
        res = CliRunner().invoke(app, ["bench", "run", "--folder", str(mini), "--out", str(tmp_path),
                                       "--stack", f"alpha=m1@{a.base_url}", "--stack", f"beta=m2@{b.base_url}",
                                       "--judge", f"j@{judge.base_url}", "--n-boot", "20"])
        assert res.exit_code == 0, res.output
        for srv in (a, b):  # the stacks' servers never judge; the judge server only judges
            assert not any(_component(text_content(x["messages"][-1]["content"])) == "judge" for x in srv.bodies)
        work = [x for x in judge.bodies if text_content(x["messages"][-1]["content"]) != PROBE_PROMPT]  # not probes
        assert {_component(text_content(x["messages"][-1]["content"])) for x in work} == {"judge"}
    report = (tmp_path / "report.md").read_text()
    assert "# Stack alpha" in report and "# Stack beta" in report and "one judge: openai:j" in report
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["stacks"]) == {"alpha", "beta"}
    for name in ("alpha", "beta"):
        main = summary["stacks"][name]["tables"][0]
        assert all(r[1].startswith("50.0") for r in main["rows"])  # every answer partially supported
        assert (tmp_path / "evaluation" / "judged" / name).is_dir()


def test_the_pipelined_run_gives_the_staged_runs_results(mini, tmp_path, monkeypatch):
    """Rows flowing through the components as their inputs exist send the same requests and write the same
    judged and choices files as stage after stage, with any number of rows under way; each unique request is
    answered once; a row's requests are built only when a place among ``rows_in_flight`` is free; progress
    counts finished rows."""
    from mmaudit.rag.evaluate import run

    events: list[tuple[str, int]] = []
    builder = run.request_builder

    def recording_builder(*args):
        build = builder(*args)

        def recorded(i: int):
            events.append(("build", i))
            return build(i)

        return recorded

    monkeypatch.setattr(run, "request_builder", recording_builder)
    files = {}
    for mode, window in (("staged", 128), ("pipelined", 128), ("rows_2", 2)):
        events.clear()
        with LocalChatServer(answer=_json_server("supported"), fail_rate=0.2, seed=3, stall=0.5) as srv:
            chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / f"{mode}.jsonl", concurrency=16,
                              timeout=0.3, backoff=0.01)
            cfg = BenchConfig(stack="s", pipeline=mode != "staged", parametric="per-question", rows_in_flight=window)
            s = run_bench(mini, chat, tmp_path / mode, cfg=cfg,
                          progress=lambda name, done, total: events.append((name, done)))
        assert s["pipelined"] == (mode != "staged") and sum(s["failed_rows"].values()) == 0
        assert set(srv.completed.values()) == {1}  # no unique request answered twice (Parametric per question)
        files[mode] = {p.relative_to(tmp_path / mode): p.read_text()
                       for p in sorted((tmp_path / mode / "evaluation").rglob("*.jsonl"))}
        files[mode + "_calls"] = len(srv.completed)
        if mode != "staged":
            built = done = most = 0
            for name, d in events:  # (the rows' stage also reports 0 when it starts)
                built, done = built + (name == "build"), done + (name == "bench run: rows" and d > 0)
                most = max(most, built - done)
            assert built == done == 32 and most <= window  # rows under way never above the window
            assert most == 2 or window != 2  # and the window is used
            assert [d for name, d in events if name == "bench run: rows"] == list(range(33))
    assert files["staged_calls"] == files["pipelined_calls"] == files["rows_2_calls"]
    assert files["staged"].keys() == files["pipelined"].keys() and files["staged"] == files["pipelined"]
    assert files["rows_2"] == files["staged"]


def test_the_same_server_error_in_a_row_stops_the_run_in_one_line_and_a_rerun_resumes(mini, tmp_path):
    """A server that answers every judge request with the same 500 (a deterministic fault, as llama.cpp's 500 to a
    response_format it does not take): the run stops after `storm_limit` such failures, not hundreds of retries,
    quoting the server, exit 2; the answers already paid for are reused by the rerun."""
    args = ["bench", "run", "--folder", str(mini), "--out", str(tmp_path), "--model", "m", "--n-boot", "20",
            "--concurrency", "1"]
    broken = {"judge": True}

    def reject(body):
        grading = text_content(body["messages"][-1]["content"]).startswith("You grade factuality")
        return 500 if broken["judge"] and grading else None

    with LocalChatServer(reject=reject) as srv:
        stopped = CliRunner().invoke(app, [*args, "--endpoint", srv.base_url])
        assert stopped.exit_code == 2, stopped.output
        (line,) = [x for x in stopped.output.splitlines() if x.startswith("error:")]
        assert "8 requests in a row failed the same way (HTTP 500: rejected with 500)" in line
        assert "rerun to resume" in line
        judged = [b for b in srv.bodies if text_content(b["messages"][-1]["content"]).startswith("You grade")]
        assert 8 <= len(judged) <= 9  # retries of the same fault included (and one in flight): no storm
        answered = len(srv.bodies) - len(judged)
        broken["judge"] = False
        done = CliRunner().invoke(app, [*args, "--endpoint", srv.base_url])
        assert done.exit_code == 0, done.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["usage"]["answer_model"]["failed"] == 0
    assert summary["usage"]["answer_model"]["cached"] >= answered - 8  # the probe's requests aside, reused
