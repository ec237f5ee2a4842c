"""Plugins from outside the tree (tests/plugin_dist, pip-installed by the test set-up and found only by its entry
points): a pixel attack with a parameter of its own, a rendered-text attack that asks for the OCR evidence check, a
dataset, a SATR router and a model family; each from the command line (the parameter set there), from Python, and the
attack under `--executor ray`; a module given with `--plugin` reaches Ray actors too. Nothing under src/ names any of
them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import mmaudit
from mmaudit.cli import app
from mmaudit.pathways import registry

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("tp_first_token", "tp_corner_stamp", "tp_tally", "tp_majority_vote", "majority vote", "tp_canned",
         "mmaudit_testplugin", "Plugin first token", "Plugin corner stamp", "paligemma", "PaliGemma", "plugin_by_flag",
         "flag_first_token")

pytestmark = pytest.mark.skipif(not registry.known("tp_first_token"),
                                reason="tests/plugin_dist is not installed (make test installs it)")


def records(run: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run / "results.jsonl").read_text().splitlines()) if r["kind"] == kind]


def test_nothing_under_src_names_a_plugin():
    hits = subprocess.run(["grep", "-rIl", "-e", NAMES[0], *[x for n in NAMES[1:] for x in ("-e", n)],
                           str(ROOT / "src" / "mmaudit")], capture_output=True, text=True).stdout.split()
    assert hits == []


def test_the_plugins_attacks_run_from_the_command_line_with_their_own_parameter(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "audit", "--model", "zoo:L1", "--data", "synthetic:2", "--attacks", "end_pgd,tp_first_token,typo_evid,"
        "tp_corner_stamp", "--attack", "tp_first_token:weight=2.5,steps=4", "--steps", "3", "--recovery", "0",
        "--ocr-limit", "2", "--n-boot", "50", "--out", str(out)])
    assert res.exit_code == 0, res.output
    mine = [r for r in records(out, "attack") if r["attack"] == "tp_first_token"]
    assert mine and all(r["params"]["weight"] == 2.5 and r["params"]["steps"] == 4 for r in mine)
    assert all(r["params"]["steps"] == 3 for r in records(out, "attack") if r["attack"] == "end_pgd")
    stamps = [r for r in records(out, "attack") if r["attack"] == "tp_corner_stamp"]
    assert stamps and all("read" in r and "used" in r for r in stamps)  # RUG's probes ran on its edits
    summary = json.loads((out / "summary.json").read_text())
    rug = summary["text"]["tp_corner_stamp"]["rug"]  # its RUG read/used rows
    assert rug["models"][0]["p_read"] == pytest.approx(sum(r["read"] for r in stamps) / len(stamps))
    ocr = [r for r in records(out, "ocr") if r["attack"] == "tp_corner_stamp"]
    assert len(ocr) == 2 and summary["ocr"]["attacks"]["tp_corner_stamp"]["checked"] == 2  # the evidence check
    assert "tp_corner_stamp" in summary["baselines"] and "tp_first_token" in summary["enhanced"]
    md = (out / "report.md").read_text()
    assert "OCR evidence check (Plugin corner stamp" in md and "Plugin corner stamp" in md
    assert "Plugin first token" in (out / "report.html").read_text()
    bad = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--attacks", "tp_first_token", "--attack",
                                   "tp_first_token:weight=-1", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "tp_first_token:weight=-1.0: weight must be positive" in bad.output


def test_the_plugins_attack_runs_from_python_on_tensors_and_in_an_audit(tmp_path):
    from mmaudit.data.synthetic import make_sample

    vlm = mmaudit.load_model("zoo:L2")
    s = make_sample("charts", 1, seed=10_000)
    x = torch.from_numpy(s.image).permute(2, 0, 1)[None].float() / 255
    atk = mmaudit.attack("tp_first_token", vlm, weight=2.0, steps=3, early_stop=False)
    adv = atk(x, [s.question], [s.answer])
    assert adv.shape == x.shape and float((adv - x).abs().max()) <= 8 / 255 + 1e-6
    assert atk.result.passes[0] >= 3
    result = mmaudit.audit(vlm, "synthetic:1", attacks=["tp_first_token", "tp_corner_stamp"],
                           attack_options={"tp_first_token": {"weight": 2.0}}, steps=2, recovery=0, ocr_limit=0,
                           n_boot=50, out=tmp_path / "py")
    assert set(result.levels["L2"].asr) == {"tp_first_token", "tp_corner_stamp"}
    table = result.to_pandas()
    assert set(table["attack"]) == {"tp_first_token", "tp_corner_stamp"}
    assert {p["weight"] for p in table[table.attack == "tp_first_token"]["params"]} == {2.0}


def test_the_plugins_family_loads_by_its_entry_point_from_python(tmp_path):
    pytest.importorskip("transformers")
    from mmaudit.models.hf.tiny import save_tiny

    folder = save_tiny(tmp_path / "pg", "paligemma")
    vlm = mmaudit.load_model(str(folder))
    assert type(vlm).__name__ == "PaliGemmaAdapter" and vlm.level == "L1"
    result = mmaudit.audit(vlm, "synthetic:1", attacks=["end_pgd", "typo_evid"], steps=2, recovery=0, ocr_limit=0,
                           n_boot=50, out=tmp_path / "run")
    assert [m.level for m in result.models] == ["L1"]


def test_plugins_reach_ray_actors_by_entry_point_and_by_flag(tmp_path):
    """A local Ray started by the audit: the installed plugin's attack, and an attack in a module that is only on
    PYTHONPATH and named with --plugin, both run in the actors; their records equal a local run's."""
    pytest.importorskip("ray")
    (tmp_path / "plugin_by_flag.py").write_text(
        "from dataclasses import dataclass\n"
        "from mmaudit.pathways import registry\n"
        "from mmaudit.pathways.pixel.end_pgd import EndPGD\n\n\n"
        "@registry.attack('flag_first_token', display='Flag first token', pathway='pixel', role='enhanced',\n"
        "                 enhances=('end_pgd',))\n"
        "@dataclass\n"
        "class FlagEndPGD(EndPGD):\n"
        "    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                                                    os.environ.get("PYTHONPATH")]))}
    args = ["audit", "--plugin", "plugin_by_flag", "--model", "zoo:L1", "--data", "synthetic:1", "--attacks",
            "tp_first_token,flag_first_token", "--attack", "tp_first_token:weight=3", "--steps", "2", "--recovery",
            "0", "--ocr-limit", "0", "--n-boot", "20"]
    for name, extra in (("local", []), ("ray", ["--executor", "ray"])):
        done = subprocess.run([sys.executable, "-m", "mmaudit.cli", *args, *extra, "--out", str(tmp_path / name)],
                              capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    local, ray = ({r["key"]: r for r in records(tmp_path / n, "attack")} for n in ("local", "ray"))
    assert local == ray and {r["attack"] for r in ray.values()} == {"tp_first_token", "flag_first_token"}
    run = records(tmp_path / "ray", "run")[-1]
    assert run["params"]["plugin"] == ["plugin_by_flag"]  # the run record keeps it (audit transfer re-imports it)


def tally_folder(root: Path, n: int = 3) -> Path:
    """A tp_tally dataset folder: synthetic charts asked their own questions, one bad line."""
    from PIL import Image

    from mmaudit.data.synthetic import make_sample

    root.mkdir(parents=True)
    lines = []
    for i in range(n):
        s = make_sample("charts", i, seed=10_000)
        Image.fromarray(s.image).save(root / f"c{i}.png")
        lines.append(f"c{i}.png\t{s.question}\t{s.answer}")
    (root / "questions.tsv").write_text("\n".join([*lines, "broken line"]) + "\n")
    return root


def test_the_plugins_dataset_reads_asks_judges_and_checks_as_it_declares(tmp_path):
    data = tally_folder(tmp_path / "tally")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L1", "--data", f"tp_tally:{data}", "--attacks",
                                   "end_pgd,nat_evid", "--steps", "2", "--recovery", "0", "--ocr-limit", "2",
                                   "--n-boot", "50", "--out", str(out)])
    assert res.exit_code == 0, res.output
    clean = records(out, "clean")
    assert len(clean) == 3 and all(r["family"] == "tp_tally" for r in clean)
    assert all(r["prompt"].endswith("\nAnswer with the number only.") for r in clean)  # its instruction
    assert len(records(out, "ocr")) == 2  # its images go through the evidence check
    summary = json.loads((out / "summary.json").read_text())
    (row,) = [r for r in summary["validity"]["clean"] if r["dataset"] == "tp_tally"]
    assert row["threshold"] == 0.2  # its floor
    assert [(e["sample"], e["field"]) for e in summary["errors"]] == [("tp_tally:4", "line")]  # named, not dropped
    from mmaudit.judge.match import Judge

    assert Judge().rule("tp_tally", "free text") == "exact"  # its judge rule
    result = mmaudit.audit("zoo:L1", f"tp_tally:{data}", attacks=["typo_evid"], recovery=0, ocr_limit=0, n_boot=50,
                           out=tmp_path / "py")
    assert set(result.to_pandas("clean")["family"]) == {"tp_tally"}


def test_the_plugins_router_is_scored_by_bench_run_beside_satr(tmp_path):
    """`bench run` on the mini benchmark with a scripted model: the plugin's router is one more method, its rows
    judged and in the main table, its decisions the majority it declares."""
    from mmaudit.models.chat import ScriptedChat
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs
    from mmaudit.rag.evaluate.config import BenchConfig
    from mmaudit.rag.evaluate.run import run_bench
    from mmaudit.rag.evaluate.score import judged_rows, main_table
    from test_bench_run import scripted

    folder = tmp_path / "bench"
    build_benchmark(mini_inputs()[:3], folder, BuildConfig(patch_steps=2, style_steps=2))
    summary = run_bench(folder, ScriptedChat(scripted), tmp_path / "out", cfg=BenchConfig(stack="scripted"))
    assert summary["failed_rows"]["tp_majority_vote"] == 0
    rows = [r for by in judged_rows(tmp_path / "out", "scripted")["tp_majority_vote"].values() for r in by]
    assert len(rows) == 48  # three questions x 16 regimes
    # the scripted branches answer P / T / M apart: no two agree, so the plugin falls back to Full-MM every time
    assert {(r["answer"], r["route"]) for r in rows} == {("M: multimodal answer", "FULL_MM")}
    table = {r["method"]: r for r in main_table(tmp_path / "out", "scripted")}
    assert table["tp_majority_vote"]["tc"] == table["full_mm"]["tc"]


def test_the_plugins_chat_backend_runs_satr_from_the_command_line_and_python(tmp_path):
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs

    folder = tmp_path / "bench"
    build_benchmark(mini_inputs()[:3], folder, BuildConfig(patch_steps=2, style_steps=2))
    res = CliRunner().invoke(app, ["bench", "run", "--folder", str(folder), "--model", "tp_canned:Paris",
                                   "--out", str(tmp_path / "cli"), "--n-boot", "50"])
    assert res.exit_code == 0, res.output
    summary = json.loads(next((tmp_path / "cli").rglob("summary.json")).read_text())
    assert summary["failures"] == [] and summary["judge"] == "tp_canned:Paris"
    table = mmaudit.run_satr(folder, "tp_canned:Paris", out=tmp_path / "py", stack="canned")
    assert {r["method"] for r in table} >= {"field_selector", "tp_majority_vote"}
    assert all(r["tc"] == 1.0 for r in table)  # every answer graded supported by the canned judge


def test_a_plugin_that_fails_to_import_is_named():
    res = CliRunner().invoke(app, ["audit", "--plugin", "no_such_module_here", "--out", "/tmp/never"])
    assert res.exit_code == 2 and "--plugin no_such_module_here: cannot import it" in res.output
