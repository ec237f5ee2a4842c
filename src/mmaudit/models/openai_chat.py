"""Any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, hosted APIs) as a cached, concurrent ChatModel.

Every request is keyed by a hash of (base URL, model, messages, sampling
parameters) and its reply kept in a run store, so nothing is paid for twice
and a killed run resumes: a second run over the same requests makes no calls.
Calls run concurrently up to ``concurrency``; rate limits (429), server errors
(5xx), timeouts and dropped connections are retried with exponential backoff
(``retries`` times), other errors surface at once. Tokens and cost are counted
per run (``usage``).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mmaudit.models.chat import Message
from mmaudit.store import RunStore, key_of

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


@dataclass
class Usage:
    calls: int = 0  # completed requests (cache misses)
    cached: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


@dataclass
class OpenAIChat:
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    cache: Path | None = None  # a store file; None keeps the cache in memory only
    concurrency: int = 8
    retries: int = 6
    timeout: float = 60.0
    backoff: float = 0.5
    temperature: float = 0.0
    max_tokens: int | None = None
    price_per_1k: tuple[float, float] = (0.0, 0.0)  # (prompt, completion) in your currency
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        self.name = f"openai:{self.model}"
        self.store = RunStore(self.cache) if self.cache else None
        self._memory: dict[str, dict] = {}

    def _client(self):
        from openai import AsyncOpenAI

        key = os.environ.get(self.api_key_env) or "EMPTY"  # local servers accept any key
        return AsyncOpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=0)

    def request_key(self, messages: Sequence[Message]) -> str:
        return key_of(kind="llm_call", base_url=self.base_url, model=self.model, messages=list(messages),
                      temperature=self.temperature, max_tokens=self.max_tokens)

    def _cached(self, key: str) -> dict | None:
        return (self.store.get(key) if self.store is not None else None) or self._memory.get(key)

    async def _one(self, client, sem: asyncio.Semaphore, messages: Sequence[Message], key: str) -> str:
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        async with sem:
            for attempt in range(self.retries + 1):
                try:
                    resp = await client.chat.completions.create(
                        model=self.model, messages=list(messages), temperature=self.temperature,
                        **({"max_tokens": self.max_tokens} if self.max_tokens else {}))
                    break
                except (APITimeoutError, APIConnectionError, APIStatusError) as e:
                    status = getattr(e, "status_code", None)
                    if status is not None and status not in RETRYABLE_STATUS or attempt == self.retries:
                        raise
                    self.usage.retries += 1
                    await asyncio.sleep(self.backoff * 2**attempt * (0.5 + random.random()))
        text = resp.choices[0].message.content or ""
        u = resp.usage
        rec = {"kind": "llm_call", "key": key, "model": self.model, "reply": text,
               "prompt_tokens": getattr(u, "prompt_tokens", 0) or 0,
               "completion_tokens": getattr(u, "completion_tokens", 0) or 0}
        self.usage.calls += 1
        self.usage.prompt_tokens += rec["prompt_tokens"]
        self.usage.completion_tokens += rec["completion_tokens"]
        self.usage.cost += (rec["prompt_tokens"] * self.price_per_1k[0]
                            + rec["completion_tokens"] * self.price_per_1k[1]) / 1000
        if self.store is not None:  # (an empty store is falsy)
            self.store.put(rec)  # fsync'd at once: a kill loses at most the calls in flight
        self._memory[key] = rec
        return text

    async def _many(self, requests: list[Sequence[Message]]) -> list[str]:
        keys = [self.request_key(m) for m in requests]
        todo: dict[str, Sequence[Message]] = {}
        for k, m in zip(keys, requests):
            if self._cached(k) is None:
                todo.setdefault(k, m)  # duplicates inside one batch are sent once
        self.usage.cached += len(keys) - len(todo)
        if todo:
            sem = asyncio.Semaphore(self.concurrency)
            client = self._client()
            try:
                await asyncio.gather(*(self._one(client, sem, m, k) for k, m in todo.items()))
            finally:
                await client.close()
        return [self._cached(k)["reply"] for k in keys]

    def chat_many(self, requests: list[Sequence[Message]]) -> list[str]:
        """Replies in request order; each unique request is sent at most once, ever (with a cache file)."""
        return asyncio.run(self._many(requests))

    def chat(self, messages: Sequence[Message], **kwargs) -> str:
        return self.chat_many([messages])[0]
