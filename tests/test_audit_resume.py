"""A killed `mmaudit audit` resumes to exactly the results of an uninterrupted run (real process, real kill)."""

import json
import signal
import subprocess
import sys
import time

ARGS = [sys.executable, "-m", "mmaudit.cli", "audit", "--model", "zoo:L1", "--data", "synthetic:8", "--steps", "8",
        "--batch", "4", "--n-boot", "200", "--attacks", "end_pgd,mantis,nat_evid", "--ocr-limit", "2"]


def records(path):
    """Result records (run records, one per invocation, differ by design and are left out)."""
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    return [r for r in recs if r["kind"] not in ("run", "run_end")]


def test_killed_audit_resumes_identically(tmp_path):
    subprocess.run([*ARGS, "--out", str(tmp_path / "full")], check=True, capture_output=True)
    full = {r["key"]: r for r in records(tmp_path / "full" / "results.jsonl")}
    n_attack = sum(r["kind"] == "attack" for r in full.values())
    assert n_attack > 8

    out = tmp_path / "killed"
    proc = subprocess.Popen([*ARGS, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = out / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:  # kill as soon as the first attack chunk has landed
        if store.exists() and any(r["kind"] == "attack" for r in records(store)):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = [r for r in records(store) if r["kind"] == "attack"]
    assert proc.returncode == -signal.SIGKILL and 0 < len(partial) < n_attack

    subprocess.run([*ARGS, "--out", str(out)], check=True, capture_output=True)
    resumed = records(store)
    keys = [r["key"] for r in resumed]
    assert len(keys) == len(set(keys)), "duplicated records"
    assert {k: r for k, r in zip(keys, resumed)} == full  # identical answers, flips, steps, image paths
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads((tmp_path / "full" / "summary.json").read_text())
