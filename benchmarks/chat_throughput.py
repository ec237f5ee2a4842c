"""Chat-call throughput against a local OpenAI-compatible server with a fixed latency, at concurrency 1 and 16.

Prints requests/s and the ratio to the ideal time (unique calls x latency /
concurrency). This measures the client layer that `bench run` will drive.

Run: .venv/bin/python benchmarks/chat_throughput.py [--n 64] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mmaudit.models.local_server import LocalChatServer
from mmaudit.models.openai_chat import OpenAIChat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.2)
    args = ap.parse_args()
    requests = [[{"role": "user", "content": f"question {i}"}] for i in range(args.n)]
    print(f"{args.n} unique requests, server latency {1000 * args.latency:.0f} ms")
    with LocalChatServer(latency=args.latency) as srv, tempfile.TemporaryDirectory() as tmp:
        for c in (1, 16):
            chat = OpenAIChat("bench", base_url=srv.base_url, cache=Path(tmp) / f"c{c}.jsonl", concurrency=c)
            t0 = time.perf_counter()
            chat.chat_many(requests)
            secs = time.perf_counter() - t0
            ideal = args.n * args.latency / c
            print(f"  concurrency {c:2}: {args.n / secs:6.1f} requests/s, {secs:6.2f} s, ideal {ideal:5.2f} s, "
                  f"ratio ideal/actual {ideal / secs:.2f}")
            before = chat.usage.calls
            t0 = time.perf_counter()
            chat.chat_many(requests)
            print(f"    rerun from the cache: {time.perf_counter() - t0:.3f} s, new calls {chat.usage.calls - before}")


if __name__ == "__main__":
    main()
