"""Reliability in figures, in one run: kills, endpoint faults, fuzzed model outputs, hostile inputs.

- kills: ``kill -9`` of ``mmaudit audit`` and of ``mmaudit bench run`` (against a local OpenAI-compatible
  server) at ``--kills`` random moments, each followed by the same command again, until one finishes; then
  the results are compared with an uninterrupted run: identical numbers and files, records lost and
  records written twice, LLM calls answered twice (a call in flight when the process dies is sent again).
- faults: ``bench run`` against a server failing 30% of first requests (429, 500, timeouts, dropped
  connections) vs a clean server: identical judged files, failed rows.
- fuzz: 10,000 malformed outputs through every parser (``mmaudit.rag.evaluate.fuzz``).
- hostile inputs: the hostile dataset (``mmaudit.data.hostile``) through the audit loader.

Run: .venv/bin/python benchmarks/reliability.py [--kills 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mmaudit.data.hostile import HOSTILE, ODD, write_hostile
from mmaudit.data.io import iter_jsonl
from mmaudit.errors import InputError
from mmaudit.models.chat.local_server import LocalChatServer
from mmaudit.rag.evaluate.fuzz import fuzz

CLI = [sys.executable, "-m", "mmaudit.cli"]


RUN_KINDS = ("run", "run_end")


def keys_written(path: Path) -> Counter:
    """Result records per key (run records, one per invocation, are not results)."""
    out: Counter = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                if rec.get("kind") not in RUN_KINDS:
                    out[rec["key"]] += 1
            except (json.JSONDecodeError, KeyError):
                out["<torn line>"] += 1
    return out


def killed_until_done(cmd: list[str], kills: int, rng: random.Random, span: float) -> tuple[int, int]:
    """Start ``cmd`` again and again, killing it (-9, its whole process group) at a random moment of each
    start, until ``kills`` kills have hit a running process (a start that finished first does not count),
    then let it finish. Returns (kills, starts)."""
    hit = attempts = 0
    while hit < kills and attempts < 4 * kills:
        attempts += 1
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(0.2, span))
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            hit += 1
        p.wait()
    attempts += 1
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        raise RuntimeError(f"the resumed run failed: {' '.join(cmd)}")
    return hit, attempts


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def audit_kills(tmp: Path, kills: int, rng: random.Random) -> dict:
    base = ["audit", "--model", "zoo:L1", "--data", "synthetic:6", "--steps", "4", "--attacks", "end_pgd,mantis",
            "--recovery", "0", "--n-boot", "200"]
    ref, run = tmp / "audit-ref", tmp / "audit-killed"
    span = timed(CLI + base + ["--out", str(ref)])
    hit, attempts = killed_until_done(CLI + base + ["--out", str(run)], kills, rng, span)
    a, b = (json.loads((d / "summary.json").read_text())["models"] for d in (ref, run))
    want, got = keys_written(ref / "results.jsonl"), keys_written(run / "results.jsonl")
    return {"kills": hit, "attempts": attempts, "identical": a == b, "records": len(want),
            "lost": len(set(want) - set(got)), "written_twice": sum(n > 1 for n in got.values()),
            "torn_lines": got.get("<torn line>", 0), "uninterrupted_s": round(span, 1)}


def judged(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): p.read_text() for p in sorted((out / "evaluation").rglob("*.jsonl"))}


def bench_kills(tmp: Path, folder: Path, kills: int, rng: random.Random) -> dict:
    with LocalChatServer(latency=0.05) as srv:
        base = ["bench", "run", "--folder", str(folder), "--model", "m", "--endpoint", srv.base_url,
                "--concurrency", "8", "--n-boot", "50", "--parametric", "per-question"]
        span = timed(CLI + base + ["--out", str(tmp / "bench-ref")])
        first = Counter(srv.completed)
        srv.completed.clear()
        hit, attempts = killed_until_done(CLI + base + ["--out", str(tmp / "bench-killed")], kills, rng, span)
        again = Counter(srv.completed)
    calls = keys_written(tmp / "bench-killed" / "calls.jsonl")
    return {"kills": hit, "attempts": attempts,
            "identical": judged(tmp / "bench-ref") == judged(tmp / "bench-killed"),
            "unique_calls": len(first), "calls_lost": len(set(first) - set(again)),
            "calls_answered_twice": sum(n - 1 for n in again.values() if n > 1),
            "records_written_twice": sum(n > 1 for k, n in calls.items() if k != "<torn line>"),
            "torn_lines": calls.get("<torn line>", 0), "uninterrupted_s": round(span, 1)}


def faults(tmp: Path, folder: Path) -> dict:
    from mmaudit.models.chat.endpoint import OpenAIChat
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.rag.evaluate.run import run_bench

    out = {}
    for name, rate in (("clean", 0.0), ("faulty", 0.3)):
        with LocalChatServer(fail_rate=rate, seed=7, stall=0.6, kinds=("429", "500", "timeout", "drop")) as srv:
            chat = OpenAIChat("m", base_url=srv.base_url, cache=tmp / f"{name}.jsonl", concurrency=8, timeout=0.4,
                              backoff=0.01)
            s = run_bench(folder, chat, tmp / name, cfg=BenchConfig(stack="s", parametric="per-question"))
            out[name] = {"injected": dict(srv.failed), "retries": chat.usage.retries,
                         "failed_rows": sum(s["failed_rows"].values()),
                         "answered_twice": sum(n - 1 for n in srv.completed.values() if n > 1)}
    out["identical"] = judged(tmp / "clean") == judged(tmp / "faulty")
    return out


def hostile(tmp: Path) -> dict:
    items = list(iter_jsonl(write_hostile(tmp) / "samples.jsonl"))
    errors = {e.sample_id: e.reason for e in items if isinstance(e, InputError)}
    notes = {s.id: s.meta.get("input_notes", []) for s in items if not isinstance(s, InputError)}
    return {"rows": len(items), "refused": len(errors), "hostile_refused": sum(h in errors for h in HOSTILE),
            "hostile": len(HOSTILE), "odd_converted_with_note": sum(bool(notes.get(o)) for o in ODD),
            "odd": len(ODD), "reasons": {k: v[:90] for k, v in errors.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        folder = tmp / "bench"
        build_benchmark(mini_inputs()[:2], folder, BuildConfig(patch_steps=3, style_steps=3))
        report = {"fuzz": {k: {"exceptions": v["exceptions"], "outcomes": v["outcomes"]}
                           for k, v in fuzz(10_000, args.seed).items()},
                  "hostile_inputs": hostile(tmp / "hostile"),
                  "faults": faults(tmp / "faults", folder),
                  "kills_audit": audit_kills(tmp, args.kills, rng),
                  "kills_bench_run": bench_kills(tmp, folder, args.kills, rng)}
    for section, value in report.items():
        print(f"{section}: {json.dumps(value)}")
    holds = (all(v["exceptions"] == 0 for v in report["fuzz"].values())
             and report["hostile_inputs"]["hostile_refused"] == len(HOSTILE)
             and report["faults"]["identical"] and report["faults"]["faulty"]["failed_rows"] == 0
             and report["kills_audit"]["identical"] and report["kills_audit"]["lost"] == 0
             and report["kills_audit"]["written_twice"] == 0
             and report["kills_bench_run"]["identical"] and report["kills_bench_run"]["records_written_twice"] == 0)
    print(json.dumps({"holds": holds, "kills": report["kills_audit"]["kills"] + report["kills_bench_run"]["kills"],
                      "calls_answered_twice_after_kills": report["kills_bench_run"]["calls_answered_twice"]}))


if __name__ == "__main__":
    main()
