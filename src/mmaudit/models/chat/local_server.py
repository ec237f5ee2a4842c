"""A minimal OpenAI-compatible chat server for tests and benchmarks: fixed latency, injected failures.

A request is answered ``latency`` seconds after its headers arrived (its own parsing and hashing inside that
time), on a kept-alive connection.

Replies are a deterministic function of the messages (``echo:<hash>``), or of
``answer(body)`` when given (a reply, or a reply and its tokens' log-probabilities, sent back when the
request asks for ``logprobs``). ``fail_rate`` of the requests fail once each, as a
429 (with ``Retry-After: retry_after`` when set), a 500, a timeout (the
server sleeps past the client's timeout) or, with ``"drop"`` among ``kinds``,
a connection closed without a reply; a retried request then succeeds.
``reject(body) -> status | None`` fails chosen requests every time (a 400, say);
``raw_reply(body) -> (content type, bytes) | None`` answers chosen ones with a 200 that is no chat completion
(a proxy's page, a broken server).
``completed`` counts the 200 replies per request, so a test can check that no
unique request was answered twice; ``bodies`` keeps every request body that
arrived (to check what a client sent, images included).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from mmaudit.models.chat.base import text_content


def reply_for(messages: list[dict]) -> str:
    return "echo:" + hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


class LocalChatServer:
    def __init__(self, latency: float = 0.0, fail_rate: float = 0.0, seed: int = 0, stall: float = 3.0,
                 answer: Callable[[dict], str] | None = None, reject: Callable[[dict], int | None] | None = None,
                 retry_after: float | None = None, kinds: tuple[str, ...] = ("429", "500", "timeout"),
                 raw_reply: Callable[[dict], tuple[str, bytes] | None] | None = None) -> None:
        self.latency, self.fail_rate, self.stall, self.raw_reply = latency, fail_rate, stall, raw_reply
        self.answer, self.reject, self.retry_after = answer, reject, retry_after
        self.bodies: list[dict] = []
        self.kinds = kinds
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.completed: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.connections = 0  # connections opened to this server
        server = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive and no Nagle, as a real endpoint (vLLM's uvicorn) serves: HTTP/1.0 made every request a
            # new connection, and Nagle held a reply's body behind its headers until the client's delayed ACK.
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.connections += 1

            def handle(self) -> None:
                try:
                    super().handle()
                except (ConnectionError, TimeoutError):
                    pass  # a client killed or gone mid-request: its connection ends, the server goes on

            def do_POST(self):  # noqa: N802
                arrived = time.perf_counter()
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the connection lives on
                if not self.path.endswith("/v1/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:  # a body cut short by a client that died while sending
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                messages = body["messages"]
                key = reply_for(messages)
                status = server.reject(body) if server.reject else None
                with server.lock:
                    server.bodies.append(body)
                if status:
                    self._send(status, {"error": {"message": f"rejected with {status}"}})
                    return
                with server.lock:
                    first = key not in server.seen
                    server.seen.add(key)
                    fail = first and server.rng.random() < server.fail_rate
                    kind = server.kinds[int(server.rng.integers(len(server.kinds)))] if fail else ""
                time.sleep(max(0.0, server.latency - (time.perf_counter() - arrived)))  # reply `latency` after
                if kind:
                    with server.lock:
                        server.failed[kind] += 1
                    if kind == "timeout":
                        time.sleep(server.stall)
                    if kind == "drop":  # the connection dies without a reply
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    wait = {"Retry-After": str(server.retry_after)} if kind == "429" and server.retry_after else {}
                    self._send(429 if kind == "429" else 500, {"error": {"message": f"injected {kind}"}}, wait)
                    return
                raw_reply = server.raw_reply(body) if server.raw_reply else None
                if raw_reply is not None:
                    self._send(200, raw_reply[1], {"Content-Type": raw_reply[0]})
                    return
                text = server.answer(body) if server.answer else reply_for(messages)
                scored = {}
                if isinstance(text, tuple):  # (reply, its tokens' log-probabilities), sent when asked for
                    text, lps = text
                    if body.get("logprobs"):
                        scored = {"logprobs": {"content": [{"token": f"t{i}", "logprob": lp}
                                                           for i, lp in enumerate(lps)]}}
                words = sum(len(text_content(m["content"]).split()) for m in messages)
                self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}} | scored],
                                 "usage": {"prompt_tokens": words, "completion_tokens": 1,
                                           "total_tokens": words + 1}})
                with server.lock:
                    server.completed[key] += 1

            def _send(self, status: int, payload: dict | bytes, headers: dict | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                headers = {"Content-Type": "application/json"} | (headers or {})
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default listen backlog (5) drops bursts of connects: 1 s SYN retries

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self) -> LocalChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
