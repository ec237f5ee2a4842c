"""OpenAI-compatible chat: retries through injected 429/500/timeouts, no duplicate calls, a second run from cache."""

import pytest

pytest.importorskip("openai")

from mmaudit.models.chat.endpoint import OpenAIChat  # noqa: E402
from mmaudit.models.chat.local_server import LocalChatServer, reply_for  # noqa: E402

REQUESTS = [[{"role": "user", "content": f"question {i % 40}?"}] for i in range(50)]  # 40 unique, 10 repeats


def test_failures_then_none_give_identical_results_and_no_duplicate_calls(tmp_path):
    with LocalChatServer(fail_rate=0.3, seed=1, stall=1.5) as srv:
        flaky = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "a.jsonl", concurrency=8, timeout=0.5,
                           backoff=0.01)
        first = flaky.chat_many(REQUESTS)
        assert sum(srv.failed.values()) >= 5 and flaky.usage.retries >= 5  # failures were injected and retried
        assert len(srv.completed) == 40 and set(srv.completed.values()) == {1}  # calls = unique requests
        again = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "a.jsonl")
        assert again.chat_many(REQUESTS) == first and again.usage.calls == 0  # a second run makes none
    with LocalChatServer(fail_rate=0.0) as srv:
        clean = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "b.jsonl", concurrency=8)
        assert clean.chat_many(REQUESTS) == first == [reply_for(m) for m in REQUESTS]
        assert clean.usage.calls == 40 and clean.usage.prompt_tokens > 0


def test_a_non_retryable_error_fails_that_request_only(tmp_path):
    """A 400 on one request: that reply is a FailedReply with the reason; the others are answered."""
    from mmaudit.models.chat import FailedReply

    bad = "question 3?"
    with LocalChatServer(reject=lambda body: 400 if body["messages"][0]["content"] == bad else None) as srv:
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "c.jsonl", retries=2, backoff=0.01)
        replies = chat.chat_many(REQUESTS[:10])
        assert isinstance(replies[3], FailedReply) and "400" in replies[3].reason and replies[3] == ""
        assert all(r == reply_for(m) for i, (r, m) in enumerate(zip(replies, REQUESTS)) if i != 3)
        assert chat.usage.failed == 1 and chat.usage.retries == 0  # a 400 is not retried
        wrong_route = OpenAIChat("m", base_url=srv.base_url.replace("/v1", "/nope"), retries=1, backoff=0.01)
        (r,) = wrong_route.chat_many([[{"role": "user", "content": "hi"}]])
        assert isinstance(r, FailedReply) and "404" in r.reason


def test_retry_after_is_honoured(tmp_path):
    import time

    with LocalChatServer(fail_rate=1.0, seed=0, retry_after=0.4, kinds=("429",)) as srv:
        chat = OpenAIChat("m", base_url=srv.base_url, retries=3, backoff=0.001, timeout=5)
        t0 = time.perf_counter()
        replies = chat.chat_many(REQUESTS[:3])
        waited = time.perf_counter() - t0
    assert replies == [reply_for(m) for m in REQUESTS[:3]] and srv.failed["429"] == 3
    assert waited >= 0.4 and chat.usage.retries == 3  # each 429 said to wait 0.4 s (backoff alone: ~1 ms)


def test_budget_stops_cleanly_and_a_rerun_resumes(tmp_path):
    from mmaudit.models.chat import BudgetExceeded

    with LocalChatServer() as srv:
        capped = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "d.jsonl", concurrency=1,
                            price_per_1k=(1.0, 1.0), budget=0.01)
        with pytest.raises(BudgetExceeded, match="rerun to resume"):
            capped.chat_many(REQUESTS[:20])
        spent = capped.usage.calls
        assert 1 <= spent < 20 and capped.usage.cost >= 0.01
        resumed = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "d.jsonl", concurrency=1)
        assert resumed.chat_many(REQUESTS[:20]) == [reply_for(m) for m in REQUESTS[:20]]
        assert resumed.usage.cached == spent and resumed.usage.calls == 20 - spent


def test_a_schema_goes_out_as_response_format_and_a_400_to_it_falls_back_once(tmp_path):
    from mmaudit.rag.evaluate import schemas

    asks = [[{"role": "user", "content": f"gate {i}"}] for i in range(6)]
    with LocalChatServer() as srv:  # an endpoint that decodes under a schema
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "s.jsonl", concurrency=1)
        chat.chat_many(asks, schema=schemas.SELF_CHECK)
        fmt = [b.get("response_format") for b in srv.bodies]
        assert len(fmt) == 6 and all(f["type"] == "json_schema" for f in fmt)
        assert fmt[0]["json_schema"]["strict"] is True
        assert fmt[0]["json_schema"]["schema"]["properties"]["decision"]["enum"] == ["TRUST", "FALLBACK"]
        assert chat.usage.schema_fallbacks == 0 and not chat.schema_rejected
    refuses = lambda body: 400 if "response_format" in body else None  # noqa: E731
    with LocalChatServer(reject=refuses) as srv:  # one that answers 400 to it
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "r.jsonl", concurrency=1)
        replies = chat.chat_many(asks, schema=schemas.SELF_CHECK)
        assert replies == [reply_for(m) for m in asks] and chat.schema_rejected
        with_fmt = [b for b in srv.bodies if "response_format" in b]
        assert len(with_fmt) == 1 and len(srv.bodies) == 7  # refused once, remembered: 6 plain requests
        assert chat.usage.schema_fallbacks == 1 and chat.usage.failed == 0
        chat.chat_many([[{"role": "user", "content": "judge 1"}]], schema=schemas.JUDGE)
        assert len([b for b in srv.bodies if "response_format" in b]) == 1  # nothing sent with it again
        # a fresh client (a rerun) learns it again from one refusal and reuses the plain replies it cached
        rerun = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "r.jsonl", concurrency=1)
        assert rerun.chat_many(asks, schema=schemas.SELF_CHECK) == replies and rerun.usage.calls == 0
    other = lambda body: 400 if body["messages"][0]["content"] == "gate 2" else None  # noqa: E731
    with LocalChatServer(reject=other) as srv:  # a 400 that is not about the schema fails that request only
        chat = OpenAIChat("m", base_url=srv.base_url, concurrency=1, retries=1, backoff=0.01)
        replies = chat.chat_many(asks, schema=schemas.SELF_CHECK)
        assert replies[2] == "" and "400" in replies[2].reason and not chat.schema_rejected
        assert all(r == reply_for(m) for i, (r, m) in enumerate(zip(replies, asks)) if i != 2)


def test_a_200_that_is_no_chat_completion_fails_that_request_only_and_is_not_cached(tmp_path):
    """A proxy's HTML page, JSON without choices, a non-string content: each a FailedReply naming what is
    wrong, counted, never cached (a rerun against a working endpoint answers it); junk token counts read 0."""
    import json

    from mmaudit.models.chat import FailedReply

    pages = {"question 1?": ("text/html", b"<html>502 Bad Gateway</html>"),
             "question 2?": ("application/json", b'{"object": "error"}'),
             "question 3?": ("application/json", json.dumps({"choices": [{"message": {"content": 7}}]}).encode()),
             "question 4?": ("application/json", json.dumps({"choices": [{"message": {"content": "ok"}}],
                                                             "usage": {"prompt_tokens": "many",
                                                                       "completion_tokens": -3}}).encode())}
    broken = lambda body: pages.get(body["messages"][0]["content"])  # noqa: E731
    with LocalChatServer(raw_reply=broken) as srv:
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "m.jsonl", retries=2, backoff=0.01)
        replies = chat.chat_many(REQUESTS[:6])
        assert [isinstance(r, FailedReply) for r in replies] == [False, True, True, True, False, False]
        assert "malformed reply" in replies[1].reason and "502 Bad Gateway" in replies[1].reason
        assert "no choices[0].message.content" in replies[2].reason and "content is int" in replies[3].reason
        assert replies[4] == "ok" and replies[0] == reply_for(REQUESTS[0]) and chat.usage.failed == 3
        assert chat.usage.calls == 3 and chat.usage.prompt_tokens == sum(len(m[0]["content"].split())
                                                                         for m in (REQUESTS[0], REQUESTS[5]))
        assert chat.usage.completion_tokens == 2  # question 4's junk counts read as 0
        srv.raw_reply = None  # the endpoint works again
        rerun = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "m.jsonl")
        assert rerun.chat_many(REQUESTS[:6])[1:4] == [reply_for(m) for m in REQUESTS[1:4]]
        assert rerun.usage.calls == 3 and rerun.usage.cached == 3


def test_the_local_server_keeps_connections_alive(tmp_path):
    """One batch on one connection (HTTP/1.1 keep-alive): a reply's body is not held behind its headers."""
    with LocalChatServer() as srv:
        OpenAIChat("m", base_url=srv.base_url, concurrency=1).chat_many(REQUESTS[:12])
        assert srv.connections == 1 and sum(srv.completed.values()) == 12


def test_the_same_failure_in_a_row_raises_but_rate_limits_do_not(tmp_path):
    from mmaudit.models.chat.endpoint import EndpointFailing

    down = {"on": False}
    with LocalChatServer(reject=lambda body: 503 if down["on"] else None) as srv:
        chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "e.jsonl", concurrency=1, retries=3,
                          backoff=0.001, storm_limit=8)
        assert chat.chat_many(REQUESTS[:5]) == [reply_for(m) for m in REQUESTS[:5]]
        down["on"] = True
        with pytest.raises(EndpointFailing, match=r"8 requests in a row .*HTTP 503: rejected with 503.*rerun"):
            chat.chat_many(REQUESTS[5:40])
        assert 5 + 8 <= len(srv.bodies) <= 5 + 8 + 1  # two requests of four attempts each (and one in flight)
        down["on"] = False
        again = OpenAIChat("m", base_url=srv.base_url, cache=tmp_path / "e.jsonl", concurrency=1)
        assert again.chat_many(REQUESTS[:40]) == [reply_for(m) for m in REQUESTS[:40]] and again.usage.cached == 5
    with LocalChatServer(fail_rate=1.0, kinds=("429",), retry_after=0.01) as srv:  # every first attempt limited
        limited = OpenAIChat("m", base_url=srv.base_url, concurrency=1, retries=2, backoff=0.001, storm_limit=2)
        assert limited.chat_many(REQUESTS[:4]) == [reply_for(m) for m in REQUESTS[:4]]
        assert srv.failed["429"] == 4
