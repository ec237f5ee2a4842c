"""What a user meets first: one-line errors, partial suites said as such, strict JSON, a locked run folder, and
runs compared side by side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app


def run(*args, env=None):
    return CliRunner().invoke(app, list(args), env=env)


def strict(text: str):
    """JSON as a strict parser reads it: NaN and Infinity refused."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("args,words", [
    (["audit", "--data", "missing.jsonl"], "--data missing.jsonl: no such file"),
    (["audit", "--data", "chartqa:missing/test.json"], "no such file"),
    (["audit", "--model", "./nonexistent_dir"], "no such checkpoint folder ./nonexistent_dir"),
    (["audit", "--model", "zoo:L4"], "unknown zoo level 'L4'"),
    (["audit", "--model", "zoo:L1", "--batch", "0"], "--batch '0'"),
    (["audit", "--model", "zoo:L1", "--dtype", "fp8"], "--dtype 'fp8'"),
    (["audit", "--model", "zoo:L1", "--wrong-ocr", "maybe"], "--wrong-ocr must be one of"),
    (["audit", "--model", "foo/bar"], "could not be loaded from the Hugging Face hub"),
    (["audit", "sweep", "--model", "zoo:L9"], "unknown zoo level 'L9'"),
    (["zoo", "eval", "--level", "L4"], "unknown zoo level 'L4'"),
    (["data", "wrong", "--data", "synthetic:x"], "synthetic:N takes a positive number"),
    (["bench", "score", "--judged", "EMPTY"], "evaluation/judged"),
    (["bench", "run", "--folder", "EMPTY"], "no QIMG-7 rows"),
    (["bench", "build", "--inputs", "missing.jsonl"], "no such file or folder: missing.jsonl"),
    (["report", "EMPTY"], "not a run folder"),
    (["report", "EMPTY", "EMPTY"], "use --compare"),
    (["report", "--compare", "EMPTY", "EMPTY"], "--compare needs --out"),
])
def test_user_errors_are_one_line_and_exit_2_with_nothing_written(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "EMPTY").mkdir()
    out = tmp_path / "run"
    if args[0] in ("audit", "bench") and args[:2] != ["bench", "score"] and args[:2] != ["bench", "build"]:
        args = [*args, "--out", str(out)]
    res = run(*args, env={"HF_HUB_OFFLINE": "1"})
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], res.output
    assert "Traceback" not in res.output and not out.exists()  # no run folder, no run record


def test_a_malformed_jsonl_line_names_the_whole_reason_and_its_column(tmp_path):
    from mmaudit.data.io import iter_jsonl

    (tmp_path / "s.jsonl").write_text('{"image": "a.png", "question": "unterminated\n')
    (err,) = iter_jsonl(tmp_path / "s.jsonl")
    assert err.field == "line" and "Unterminated string starting at column 32" in err.reason


def test_flags_read_as_flags_in_the_help():
    out = CliRunner().invoke(app, ["audit", "--help"], terminal_width=200).output
    line = next(ln for ln in out.splitlines() if "--paper-protocol" in ln)
    assert "(flag)" in line and "<bool>" not in line


def test_a_partial_suite_is_labelled_and_leaves_the_gap_unmeasured(tmp_path):
    res = run("audit", "--model", "zoo:L2", "--data", "synthetic:2", "--attacks", "end_pgd", "--steps", "3",
              "--n-boot", "50", "--recovery", "0", "--ocr-limit", "0", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())  # the terminal wraps long titles
    assert "partial suite: R0 covers End-PGD; R+ covers End-PGD" in said and "not measured" in said
    summary = strict((tmp_path / "summary.json").read_text())
    cov = summary["coverage"]
    assert cov["partial"] and cov["r0"] == cov["r_plus"] == ["end_pgd"] and "gap" in cov["not_measured"]
    assert summary["models"][0]["gap"] is None and summary["levels"]["L2"]["gap"] == [None, None, None]
    page = (tmp_path / "report.html").read_text()
    assert "partial suite" in page and "not measured" in page and "R0*" in page


def test_a_full_suite_measures_the_gap_and_every_delta(tmp_path):
    res = run("audit", "--model", "zoo:L1", "--data", "synthetic:1", "--steps", "2", "--n-boot", "50",
              "--recovery", "0", "--ocr-limit", "0", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    summary = strict((tmp_path / "summary.json").read_text())
    assert not summary["coverage"]["partial"] and summary["coverage"]["not_measured"] == []
    assert summary["models"][0]["gap"] is not None and "partial suite" not in res.output
    assert [s for s in summary["headline"]["sentences"] if "the diagnostics expose" in s]


def every_json(folder: Path):
    for path in folder.rglob("*"):
        if path.suffix == ".json":
            yield path, [path.read_text()]
        elif path.suffix == ".jsonl":
            yield path, [ln for ln in path.read_text().splitlines() if ln.strip()]


def test_every_json_the_tool_writes_parses_strictly(tmp_path):
    """An audit whose OAR and correlations hit empty sets (NaN in Python) and a bench run: null, never NaN."""
    from mmaudit.models.chat.local_server import LocalChatServer

    res = run("audit", "--model", "zoo:L1", "--data", "synthetic:1", "--steps", "2", "--n-boot", "30",
              "--eps", "0", "--out", str(tmp_path / "audit"))
    assert res.exit_code == 0, res.output
    assert run("bench", "build", "--out", str(tmp_path / "bench"), "--limit", "1", "--patch-steps", "2",
               "--style-steps", "2").exit_code == 0
    with LocalChatServer() as srv:
        res = run("bench", "run", "--folder", str(tmp_path / "bench"), "--out", str(tmp_path / "bench-run"),
                  "--endpoint", srv.base_url, "--model", "echo", "--n-boot", "50")
    assert res.exit_code == 0, res.output
    summary = (tmp_path / "audit" / "summary.json").read_text()
    assert "NaN" not in summary and "null" in summary  # there were undefined numbers, written as null
    checked = 0
    for _path, docs in every_json(tmp_path):
        for doc in docs:
            strict(doc)
            checked += 1
    assert checked > 100
    scored = run("bench", "score", "--judged", str(tmp_path / "bench-run"), "--tables", "--json", "--n-boot", "0")
    data = strict(scored.output)
    titles = [t["title"] for t in data["tables"]]
    assert data["main"] and any(t.startswith("Decisions") for t in titles)
    assert any("Route accuracy" in t for t in titles)


def test_judged_files_without_routes_say_decisions_are_not_available(tmp_path):
    from mmaudit.rag.evaluate.tables import NOT_AVAILABLE, bench_tables

    folder = tmp_path / "evaluation" / "judged" / "s" / "ds"
    folder.mkdir(parents=True)
    for m in ("parametric", "text_only", "full_mm", "field_selector"):
        rows = [{"qid": q, "dataset": "ds", "regime": reg, "baseline": m, "label": "supported", "score": 1.0}
                for q in (1, 2) for reg in ("TC_IC", "TP_IC")]
        (folder / f"{m}_2.judged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tables = {t: rows for t, _, rows in bench_tables(tmp_path, None, 0, 0)}
    decisions = next(rows for t, rows in tables.items() if t.startswith("Decisions"))
    routes = next(rows for t, rows in tables.items() if t.startswith("Route accuracy"))
    assert all(r[1] == NOT_AVAILABLE for r in decisions) and all(r[1] == NOT_AVAILABLE for r in routes)
    assert not any("100.0" in " ".join(r) for r in decisions)


HOLD = ("import sys, time; from mmaudit.lock import RunLock\n"
        "with RunLock(sys.argv[1], 'holder'):\n"
        "    print('held', flush=True); time.sleep(60)\n")


def holder(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_on_a_locked_run_folder_exits_2_naming_the_holder(tmp_path):
    proc = holder(tmp_path)
    try:
        res = run("audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks", "typo_evid", "--out",
                  str(tmp_path))
        assert res.exit_code == 2 and f"in use by process {proc.pid}" in res.output and "--wait" in res.output
        assert not (tmp_path / "results.jsonl").exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_stale_lock_of_a_killed_process_is_taken_over(tmp_path):
    proc = holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == proc.pid  # the file still names the dead holder
    res = run("audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks", "typo_evid", "--n-boot", "20",
              "--ocr-limit", "0", "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert f"took over the lock of process {proc.pid}" in res.output and (tmp_path / "summary.json").exists()


def test_wait_waits_for_the_holder(tmp_path):
    proc = holder(tmp_path)
    t0 = time.time()
    try:
        import threading

        threading.Timer(1.5, proc.kill).start()
        res = run("audit", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks", "typo_evid", "--n-boot", "20",
                  "--ocr-limit", "0", "--wait", "--out", str(tmp_path))
        assert res.exit_code == 0, res.output and time.time() - t0 >= 1.5
    finally:
        proc.kill()
        proc.wait()


def test_report_compare_puts_two_runs_side_by_side_with_paired_differences(tmp_path):
    common = ["audit", "--model", "zoo:L1", "--model", "zoo:L2", "--data", "synthetic:2", "--steps", "4",
              "--attacks", "end_pgd,mantis,typo_evid", "--n-boot", "50", "--recovery", "0", "--ocr-limit", "0"]
    for name, eps in (("weak", "2/255"), ("strong", "8/255")):
        assert run(*common, "--eps", eps, "--out", str(tmp_path / name)).exit_code == 0
    res = run("report", "--compare", str(tmp_path / "weak"), str(tmp_path / "strong"), "--out", str(tmp_path / "cmp"),
              "--n-boot", "500")
    assert res.exit_code == 0, res.output
    result = strict((tmp_path / "cmp" / "compare.json").read_text())
    weak, strong = (strict((tmp_path / n / "summary.json").read_text()) for n in ("weak", "strong"))
    assert [r["name"] for r in result["runs"]] == ["weak", "strong"] and len(result["rows"]) == 2
    for d in result["paired"]:
        a = next(m for m in weak["models"] if m["model"] == d["model"])
        b = next(m for m in strong["models"] if m["model"] == d["model"])
        point, lo, hi = d["r_plus"]
        assert d["shared"] == a["n"] == b["n"]  # the same questions, paired
        assert point == pytest.approx(b["r_plus"] - a["r_plus"])  # the difference of the two runs' own R+
        assert lo <= point <= hi
        gap, glo, ghi = d["gap"]
        assert gap == pytest.approx(b["gap"] - a["gap"]) and glo <= gap <= ghi
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "Paired differences against weak" in page and "Table 1, aligned" in page and "Headlines" in page


def test_paired_difference_by_hand_and_against_scipys_paired_bootstrap():
    import numpy as np
    from scipy import stats as sps

    from mmaudit.report.compare import paired_difference
    from mmaudit.stats import ModelFlags

    # 10 shared questions (run b also scored q10, which the pairing leaves out). Run a: C = q0..q7, End-PGD flips
    # q0, q1, MANTIS q2 -> R+ 3/8, R0 2/8. Run b: C = q0..q8, End-PGD q0..q3, MANTIS q4, q5 -> R+ 6/9, R0 4/9.
    def flags(n, correct, end, mantis):
        qs = [f"q{i:02d}" for i in range(n)]
        return ModelFlags("m", "L1", qs, np.isin(range(n), correct),
                          {"end_pgd": np.isin(range(n), end), "mantis": np.isin(range(n), mantis)})

    a = flags(10, range(8), [0, 1], [2])
    b = flags(11, [*range(9), 10], [0, 1, 2, 3], [4, 5])
    d = paired_difference(a, b, ["end_pgd", "mantis"], ["end_pgd", "mantis"], n_boot=4000, seed=0)
    assert d["shared"] == 10
    assert d["r_plus"][0] == pytest.approx(6 / 9 - 3 / 8) and d["gap"][0] == pytest.approx((6 - 4) / 9 - (3 - 2) / 8)
    # of q0..q7 (in both clean-correct sets) b's R+ alone flips q3, q4, q5; a's alone none
    assert (d["both_correct"], d["only_run"], d["only_reference"]) == (8, 3, 0)
    # the same statistic under scipy's paired percentile bootstrap over the shared questions
    ca, ua = a.correct[:10].astype(float), np.isin(range(10), [0, 1, 2]).astype(float)
    cb, ub = b.correct[:10].astype(float), np.isin(range(10), range(6)).astype(float)
    ref = sps.bootstrap((ua, ca, ub, cb), lambda ua, ca, ub, cb: ub.sum() / cb.sum() - ua.sum() / ca.sum(),
                        paired=True, vectorized=False, method="percentile", n_resamples=4000,
                        random_state=1).confidence_interval
    assert d["r_plus"][1] == pytest.approx(ref.low, abs=0.05) and d["r_plus"][2] == pytest.approx(ref.high, abs=0.05)
    # a run against itself: every replicate's difference is 0
    same = paired_difference(a, a, ["end_pgd", "mantis"], ["end_pgd", "mantis"], n_boot=500, seed=0)
    assert same["r_plus"] == [0.0, 0.0, 0.0] and same["gap"] == [0.0, 0.0, 0.0]
