"""Any OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, hosted APIs) as a cached, concurrent ChatModel.

Every request is keyed by a hash of (base URL, model, messages, sampling
parameters) and its reply kept in a run store, so nothing is paid for twice
and a killed run resumes: a second run over the same requests makes no calls.
Calls run concurrently up to ``concurrency``; rate limits (429), server errors
(5xx), timeouts and dropped connections are retried with exponential backoff
(``retries`` times), waiting at least what a ``Retry-After`` header asks. A
request that still fails, or fails with a non-retryable error (a 400), comes
back as a :class:`FailedReply` (empty, with its reason; not cached, so a rerun
tries again) and the other requests go on. Tokens and cost are counted per run
(``usage``); with ``budget`` set, no request starts once the cost reached it,
and the call raises :class:`BudgetExceeded` after the ones in flight finish.

A request may carry a JSON ``schema`` (mmaudit.rag.evaluate.schemas): it is sent in the structured form the
endpoint takes (``structured``, found by :func:`mmaudit.models.chat.probe.probe` before the work: a strict
``json_schema``, llama.cpp's ``json_object`` with a ``schema``, a bare ``json_object``, or none). An endpoint that
still rejects it (HTTP 400 or 422, or a 5xx whose body names ``response_format``) gets the request again without
it (plain prompting), never a retry, and this client remembers not to send one again (``schema_rejected``,
reported in ``usage``).

No retry storms: the same failure (status and the server's words) ``storm_limit`` times in a row, across requests
and retries with no success between, is no transient fault (429s and timeouts, which repeat under load, are not
counted): the call raises :class:`EndpointFailing`, which quotes the server (the command ends with one line and
exit 2; every finished call is cached, a rerun resumes).
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mmaudit.errors import MMAuditError
from mmaudit.models.chat.backends import backend
from mmaudit.models.chat.base import BudgetExceeded, FailedReply, Message
from mmaudit.models.chat.probe import error_text, rejects_format, response_format
from mmaudit.store import RunStore, key_of

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointFailing(MMAuditError):
    """The endpoint answered the same failure too many times in a row: a deterministic fault, not a transient one."""
MAX_RETRY_AFTER = 120.0  # seconds: a server asking for longer is waited on for this long, then retried


def retry_after(error) -> float | None:
    """Seconds a ``Retry-After`` header (or ``retry-after-ms``) on the error's response asks to wait."""
    headers = getattr(getattr(error, "response", None), "headers", None) or {}
    try:
        if headers.get("retry-after-ms") is not None:
            return float(headers["retry-after-ms"]) / 1000
        if headers.get("retry-after") is not None:
            return float(headers["retry-after"])
    except (TypeError, ValueError):
        return None
    return None


async def post(client, body: dict):
    """One chat completion through the client's generic ``post``: the JSON body as built (the typed ``create``
    walks every message part of the request and builds a model of the reply: a few ms of one event loop's
    time per call, which a concurrent run spends serially)."""
    return await client.post("/chat/completions", body=body, cast_to=object)


def completion_of(resp) -> tuple[str, int, int]:
    """The reply text and token counts of a chat completion's JSON; ValueError naming what is not there."""
    try:
        text = resp["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"no choices[0].message.content in {str(resp)[:200]!r}") from None
    if text is not None and not isinstance(text, str):
        raise ValueError(f"content is {type(text).__name__}, not a string")
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}

    def count(name: str) -> int:
        n = usage.get(name)
        return n if isinstance(n, int) and n >= 0 else 0

    return text or "", count("prompt_tokens"), count("completion_tokens")


def token_logprobs(resp) -> list[float] | None:
    """The log-probability of each token of a chat completion's reply (``choices[0].logprobs.content``), or None
    when the endpoint sent none."""
    try:
        content = resp["choices"][0]["logprobs"]["content"]
        return [float(t["logprob"]) for t in content]
    except (KeyError, IndexError, TypeError, ValueError):
        return None


@lru_cache(maxsize=1)
def plain_http_ssl() -> ssl.SSLContext:
    """One verifying SSL context per process for plain-http endpoints (a local vLLM), where it serves only a
    redirect to https: loading the CA store for each client costs 20-35 ms of every batch's wall time."""
    return ssl.create_default_context()


@dataclass
class Usage:
    calls: int = 0  # completed requests (cache misses)
    cached: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    failed: int = 0  # requests that came back as FailedReply
    schema_fallbacks: int = 0  # requests re-sent without response_format after the endpoint rejected it

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("calls", "cached", "retries", "failed", "schema_fallbacks",
                                              "prompt_tokens", "completion_tokens", "cost")}


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
    budget: float | None = None  # stop starting requests once usage.cost reaches this
    structured: str = "json_schema"  # the response_format form a schema is sent in (probe.FORMS, or "plain")
    storm_limit: int = 8  # the same failure this many times in a row stops the run
    usage: Usage = field(default_factory=Usage)

    takes_budget = True  # chat_many(requests, max_new_tokens=...) sets max_tokens per call
    takes_schema = True  # chat_many(requests, schema=...) asks for JSON of that schema
    probes = True  # the bench probes an endpoint's capabilities (and, for images, shows it a canary) first

    def __post_init__(self) -> None:
        self.name = f"openai:{self.model}"
        self.store = RunStore(self.cache) if self.cache else None
        self._memory: dict[str, dict] = {}
        self._failures: dict[str, str] = {}
        self._salts: dict[str, str] = {}
        self._unwritten: list[dict] = []
        self._writer: asyncio.Future | None = None
        self._session = None
        self.schema_rejected = False  # the endpoint rejected a response_format: send none again
        self._streak: tuple[str, int] = ("", 0)  # the last failure's signature and how often it came in a row

    def _client(self):
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        key = os.environ.get(self.api_key_env) or "EMPTY"  # local servers accept any key
        http = (DefaultAsyncHttpxClient(verify=plain_http_ssl())
                if (self.base_url or "").startswith("http://") else None)
        return AsyncOpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=0,
                           http_client=http)

    def request_key(self, messages: Sequence[Message], max_tokens: int | None = None, salt: str = "",
                    schema: dict | None = None, logprobs: bool = False) -> str:
        """The cache key: endpoint, model, messages (image bytes included, as data URLs), sampling, salt, the
        schema the reply was decoded under (none once the endpoint rejected schemas), and whether the reply's
        token log-probabilities were asked for."""
        form = {"form": self.structured} if schema and self.structured != "json_schema" else {}
        return key_of(kind="llm_call", base_url=self.base_url, model=self.model, messages=list(messages),
                      temperature=self.temperature, max_tokens=max_tokens or self.max_tokens,
                      **({"salt": salt} if salt else {}), **({"schema": schema} if schema else {}), **form,
                      **({"logprobs": True} if logprobs else {}))

    def failed_in_a_row(self, status: int | None, said: str) -> None:
        """Count a failure; the same one ``storm_limit`` times in a row raises :class:`EndpointFailing`."""
        sig = f"{status}|{said[:300]}"
        count = self._streak[1] + 1 if self._streak[0] == sig else 1
        self._streak = (sig, count)
        if count >= self.storm_limit:
            what = f"HTTP {status}" if status is not None else "no reply"
            raise EndpointFailing(f"{self.model} at {self.base_url}: {count} requests in a row failed the same way "
                                  f"({what}: {said[:300]}); stopped instead of retrying. Finished calls are cached: "
                                  "fix the server or the options and rerun to resume")

    def _cached(self, key: str) -> dict | None:
        return (self.store.get(key) if self.store is not None else None) or self._memory.get(key)

    async def _one(self, client, sem: asyncio.Semaphore, messages: Sequence[Message], key: str,
                   max_tokens: int | None, schema: dict | None = None, logprobs: bool = False) -> str | None:
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        async with sem:
            if self.budget is not None and self.usage.cost >= self.budget:
                return None  # not started: the budget is spent
            limit = max_tokens or self.max_tokens
            body = {"model": self.model, "messages": list(messages), "temperature": self.temperature,
                    **({"max_tokens": limit} if limit else {}), **({"logprobs": True} if logprobs else {})}
            for attempt in range(self.retries + 1):
                rf = response_format(self.structured, schema) if schema and not self.schema_rejected else None
                fmt = {"response_format": rf} if rf else {}
                try:
                    resp = await post(client, body | fmt)
                    self._streak = ("", 0)
                    break
                except (APITimeoutError, APIConnectionError, APIStatusError) as e:
                    status = getattr(e, "status_code", None)
                    said = error_text(e)
                    if fmt and rejects_format(status, said):
                        plain_key = self.request_key(messages, max_tokens, self._salts.get(key, ""))
                        if self._cached(plain_key):  # answered plainly by an earlier run
                            self.schema_rejected = True
                            return self._cached(plain_key)["reply"]
                        try:  # the endpoint does not take response_format: the same request without it
                            resp = await post(client, body)
                        except (APITimeoutError, APIConnectionError, APIStatusError) as plain:
                            e, status = plain, getattr(plain, "status_code", None)  # not the schema's fault
                            said = error_text(e)
                        else:
                            self.schema_rejected = True
                            self.usage.schema_fallbacks += 1
                            self._streak = ("", 0)
                            key = plain_key
                            break
                    if status != 429 and not isinstance(e, APITimeoutError):  # rate limits and slowness repeat
                        self.failed_in_a_row(status, said if status is not None else type(e).__name__)
                    if status is not None and status not in RETRYABLE_STATUS or attempt == self.retries:
                        why = f"HTTP {status}" if status is not None else type(e).__name__
                        return self._fail(key, f"{why}: {said[:300]}")
                    self.usage.retries += 1
                    wait = self.backoff * 2**attempt * (0.5 + random.random())
                    asked = retry_after(e)
                    await asyncio.sleep(min(MAX_RETRY_AFTER, max(wait, asked)) if asked is not None else wait)
        try:
            text, prompt_tokens, completion_tokens = completion_of(resp)
        except ValueError as e:  # a 200 that is no chat completion (a proxy's page, a broken server): not cached
            return self._fail(key, f"malformed reply: {e}")
        rec = {"kind": "llm_call", "key": key, "model": self.model, "reply": text,
               "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        if logprobs:  # None: the endpoint sent none back
            rec["logprobs"] = token_logprobs(resp)
        self.usage.calls += 1
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += completion_tokens
        self.usage.cost += (prompt_tokens * self.price_per_1k[0] + completion_tokens * self.price_per_1k[1]) / 1000
        self._memory[key] = rec
        if self.store is not None:  # (an empty store is falsy)
            self._unwritten.append(rec)  # group commit off the event loop: a kill loses at most the calls in flight
            if self._writer is None or self._writer.done():
                self._writer = asyncio.ensure_future(self._drain())
        return text

    def _fail(self, key: str, reason: str) -> FailedReply:
        self.usage.failed += 1
        self._failures[key] = reason
        return FailedReply(reason)

    async def _drain(self) -> None:
        """Write the finished calls to the store, one fsync per batch, in a worker thread (the event loop never
        waits on the disk)."""
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            await asyncio.to_thread(self.store.put_many, batch)

    async def flush(self) -> None:
        while self._writer is not None and not self._writer.done() or self._unwritten:
            if self._writer is None or self._writer.done():
                self._writer = asyncio.ensure_future(self._drain())
            await self._writer

    async def open_session(self) -> None:
        """One client and one concurrency limit for every ``achat`` until :meth:`close_session`."""
        self._session = (self._client(), asyncio.Semaphore(self.concurrency))
        self._inflight: dict[str, asyncio.Future] = {}

    async def close_session(self) -> None:
        await self.flush()
        client, _ = self._session
        self._session = None
        await client.close()

    async def achat(self, messages: Sequence[Message], max_new_tokens: int | None = None, salt: str = "",
                    schema: dict | None = None) -> str:
        """One request inside a session: from the cache, joined to an identical request in flight, or sent
        under the session's concurrency limit. Raises :class:`BudgetExceeded` once the budget is spent."""
        schema = None if self.schema_rejected else schema
        key = self.request_key(messages, max_new_tokens, salt, schema)
        if salt:
            self._salts[key] = salt
        hit = self._cached(key)
        if hit:
            self.usage.cached += 1
            return hit["reply"]
        if key not in self._inflight:
            client, sem = self._session
            self._inflight[key] = asyncio.ensure_future(self._one(client, sem, messages, key, max_new_tokens, schema))
        else:
            self.usage.cached += 1
        reply = await self._inflight[key]
        if reply is None:
            raise BudgetExceeded(f"budget {self.budget} reached (cost {self.usage.cost:.4f}); finished calls are "
                                 "cached: rerun to resume")
        return reply

    async def _many(self, requests: list[Sequence[Message]], max_tokens: int | None,
                    salts: Sequence[str], schema: dict | None = None, logprobs: bool = False) -> list[str]:
        schema = None if self.schema_rejected else schema
        keys = [self.request_key(m, max_tokens, salt, schema, logprobs) for m, salt in zip(requests, salts)]
        self._salts.update((k, s) for k, s in zip(keys, salts) if s)
        plain = {k: self.request_key(m, max_tokens, salt) for k, m, salt in zip(keys, requests, salts)}
        todo: dict[str, Sequence[Message]] = {}
        for k, m in zip(keys, requests):
            if self._cached(k) is None:
                todo.setdefault(k, m)  # duplicates inside one batch are sent once
        self.usage.cached += len(keys) - len(todo)
        stopped = False
        if todo:
            sem = asyncio.Semaphore(self.concurrency)
            client = self._client()
            try:
                got = await asyncio.gather(*(self._one(client, sem, m, k, max_tokens, schema, logprobs)
                                             for k, m in todo.items()))
                stopped = any(g is None for g in got)
            finally:
                await self.flush()
                await client.close()
        if stopped:
            raise BudgetExceeded(f"budget {self.budget} reached (cost {self.usage.cost:.4f}); finished calls are "
                                 "cached: rerun to resume")
        def reply(k: str) -> str:  # a reply from the plain fallback is stored under the plain key
            hit = self._cached(k) or self._cached(plain[k])
            return hit["reply"] if hit else FailedReply(self._failures.get(k) or self._failures.get(plain[k],
                                                                                                   "failed"))

        return [reply(k) for k in keys]

    def chat_many(self, requests: list[Sequence[Message]], max_new_tokens: int | None = None,
                  salts: Sequence[str] | None = None, schema: dict | None = None) -> list[str]:
        """Replies in request order; each unique request is sent at most once, ever (with a cache file).
        A ``salt`` makes an otherwise identical request a call of its own (Parametric per row); a ``schema``
        asks for JSON of that schema."""
        return asyncio.run(self._many(requests, max_new_tokens, list(salts or [""] * len(requests)), schema))

    def chat(self, messages: Sequence[Message], **kwargs) -> str:
        return self.chat_many([messages])[0]

    def chat_many_scored(self, requests: list[Sequence[Message]],
                         max_new_tokens: int | None = None) -> list[tuple[str, float | None]]:
        """Replies in request order, each with the sum of its tokens' log-probabilities (the reply's own
        log-likelihood under greedy decoding; None where the endpoint returned none or the request failed)."""
        replies = asyncio.run(self._many(requests, max_new_tokens, [""] * len(requests), logprobs=True))
        out = []
        for m, reply in zip(requests, replies):
            hit = self._cached(self.request_key(m, max_new_tokens, logprobs=True))
            lps = hit.get("logprobs") if hit else None
            out.append((reply, float(sum(lps)) if lps is not None else None))
        return out


@backend("endpoint", spec="endpoint:MODEL@URL")
def endpoint_backend(args: str, cache: Path | None, settings: dict) -> OpenAIChat:
    """``endpoint:MODEL@URL``: an OpenAI-compatible endpoint (no MODEL: 'default'; no URL: the client's default);
    ``settings``: ``concurrency``, ``cost`` (price and budget)."""
    model, _, url = args.partition("@")
    return OpenAIChat(model or "default", base_url=url or None, cache=cache,
                      concurrency=settings.get("concurrency", 8), **(settings.get("cost") or {}))
