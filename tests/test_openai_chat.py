"""OpenAI-compatible chat: retries through injected 429/500/timeouts, no duplicate calls, a second run from cache."""

import pytest

pytest.importorskip("openai")

from mmaudit.models.local_server import LocalChatServer, reply_for  # noqa: E402
from mmaudit.models.openai_chat import OpenAIChat  # noqa: E402

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


def test_a_non_retryable_error_surfaces(tmp_path):
    from openai import NotFoundError

    with LocalChatServer() as srv:
        bad = OpenAIChat("m", base_url=srv.base_url.replace("/v1", "/nope"), retries=2, backoff=0.01)
        with pytest.raises(NotFoundError):
            bad.chat([{"role": "user", "content": "hi"}])
