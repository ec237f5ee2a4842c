"""`bench run` and its chat layer against a local OpenAI-compatible server with a fixed latency, concurrency 1 vs 16.

Prints requests/s of the client and rows/s of `bench run` (pipelined: rows flow
through the components as their inputs exist) on a small built benchmark, each
with the ratio r = ideal wall / measured wall (ideal = unique calls x latency /
concurrency), and as its last line a JSON object
{"client_c1": r, "client_c16": r, "bench_run_c1": r, "bench_run_c16": r}.
Each timed part starts after a ``gc.collect()`` (as ``timeit`` keeps the collector out): the first full
collection after the imports was measured at about 100 ms, a pause of the process, not of the requests,
that would otherwise land in whichever part runs first.

Run: .venv/bin/python benchmarks/chat_throughput.py [--n 64] [--latency 0.2] [--questions 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from mmaudit.models.chat.endpoint import OpenAIChat
from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
from mmaudit.rag.construct.mini import mini_inputs
from mmaudit.rag.evaluate.config import BenchConfig
from mmaudit.rag.evaluate.run import run_bench


@contextmanager
def server(latency: float):
    """The local server in a process of its own, so the client being measured does not share its GIL."""
    code = ("import sys, time; from mmaudit.models.chat.local_server import LocalChatServer\n"
            f"s = LocalChatServer(latency={latency}); s.__enter__(); print(s.base_url, flush=True)\n"
            "while True: time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        yield SimpleNamespace(base_url=proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()


def bench_run_rows(latency: float, questions: int) -> dict[str, float]:
    with server(latency) as srv, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "bench"
        build_benchmark(mini_inputs()[:questions], folder, BuildConfig(patch_steps=4, style_steps=4))
        print(f"bench run on {questions} questions ({questions * 16} rows):")
        ratios = {}
        for c in (1, 16):
            chat = OpenAIChat("bench", base_url=srv.base_url, cache=Path(tmp) / f"run{c}.jsonl", concurrency=c)
            gc.collect()
            t0 = time.perf_counter()
            s = run_bench(folder, chat, Path(tmp) / f"out{c}", cfg=BenchConfig(vision=True))
            secs = time.perf_counter() - t0
            ideal = chat.usage.calls * latency / c
            print(f"  concurrency {c:2}: {s['rows'] / secs:6.2f} rows/s, {chat.usage.calls} unique calls in "
                  f"{secs:6.2f} s, ideal {ideal:5.2f} s, ratio ideal/actual {ideal / secs:.2f}")
            ratios[f"bench_run_c{c}"] = round(ideal / secs, 3)
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--questions", type=int, default=2)
    args = ap.parse_args()
    requests = [[{"role": "user", "content": f"question {i}"}] for i in range(args.n)]
    print(f"{args.n} unique requests, server latency {1000 * args.latency:.0f} ms")
    ratios = {}
    with server(args.latency) as srv, tempfile.TemporaryDirectory() as tmp:
        for c in (1, 16):
            chat = OpenAIChat("bench", base_url=srv.base_url, cache=Path(tmp) / f"c{c}.jsonl", concurrency=c)
            gc.collect()
            t0 = time.perf_counter()
            chat.chat_many(requests)
            secs = time.perf_counter() - t0
            ideal = args.n * args.latency / c
            print(f"  concurrency {c:2}: {args.n / secs:6.1f} requests/s, {secs:6.2f} s, ideal {ideal:5.2f} s, "
                  f"ratio ideal/actual {ideal / secs:.2f}")
            ratios[f"client_c{c}"] = round(ideal / secs, 3)
            before = chat.usage.calls
            t0 = time.perf_counter()
            chat.chat_many(requests)
            print(f"    rerun from the cache: {time.perf_counter() - t0:.3f} s, new calls {chat.usage.calls - before}")
    ratios |= bench_run_rows(args.latency, args.questions)
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
