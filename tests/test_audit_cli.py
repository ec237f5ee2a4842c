"""`mmaudit audit` end to end on a trained zoo model: eps = 0 sanity, bad rows counted, report rebuilt."""

import json

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.io import write_samples
from mmaudit.data.synthetic import FAMILIES, synthetic_set
from mmaudit.jsonout import dumps
from mmaudit.report import summarise
from mmaudit.store import RunStore


def run(*args):
    res = CliRunner().invoke(app, ["audit", "--model", "zoo:L2", "--n-boot", "300", *args])
    assert res.exit_code == 0, res.output
    return res.output


def test_eps_zero_gives_zero_asr(tmp_path):
    run("--data", "synthetic:4", "--eps", "0", "--attacks", "vis_pgd,end_pgd,mantis", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["models"]
    assert row["n_correct"] > 0
    assert row["asr"] == {"vis_pgd": 0.0, "end_pgd": 0.0, "mantis": 0.0} and row["r_plus"] == 0.0


def test_bad_rows_are_recorded_and_counted(tmp_path):
    data = tmp_path / "data"
    write_samples(synthetic_set(2, seed=10_000, families=FAMILIES), data)
    rows = (data / "samples.jsonl").read_text().splitlines()
    (data / "broken.png").write_bytes(b"\x89PNG not really")
    rows.append(json.dumps({"id": "bad-image", "image": "broken.png", "question": "what ?", "answer": "1"}))
    rows.append(json.dumps({"id": "no-ref", "image": json.loads(rows[0])["image"], "question": "what ?",
                            "answer": ""}))
    (data / "samples.jsonl").write_text("\n".join(rows) + "\n")
    out = run("--data", str(data / "samples.jsonl"), "--steps", "3", "--attacks", "end_pgd", "--out",
              str(tmp_path / "run"))
    assert "2 errors (samples that could not be audited" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {(e["sample"], e["field"]) for e in summary["errors"]} == {("bad-image", "image"), ("no-ref", "answer")}
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Errors (samples that could not be audited): 2" in report and "bad-image" in report
    # tables are rebuilt from the store alone (written as the summary is: undefined numbers as null)
    again = json.loads(dumps(summarise(RunStore(tmp_path / "run" / "results.jsonl"), n_boot=300)))
    assert again["models"] == summary["models"]


@pytest.mark.parametrize("option", ["--eps", "--steps", "--paper-protocol", "--downscale"])
def test_help_lists_options(option):
    res = CliRunner().invoke(app, ["audit", "--help"])
    assert res.exit_code == 0 and option in res.output


def test_both_pathways_and_their_diagnostics_in_one_run(tmp_path):
    out = run("--data", "synthetic:3", "--steps", "5", "--ocr-limit", "4", "--out", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["models"]
    assert set(row["asr"]) == {"vis_pgd", "end_pgd", "mantis", "typo_evid", "nat_evid"}
    assert summary["baselines"] == ["vis_pgd", "end_pgd", "typo_evid"]
    assert summary["enhanced"] == {"mantis": ["vis_pgd", "end_pgd"], "nat_evid": ["typo_evid"]}
    assert row["r0"] >= max(row["asr"][a] for a in summary["baselines"]) and row["r_plus"] >= row["r0"]
    assert row["gap"] == row["r_plus"] - row["r0"]  # the headline quantity, per model and per level
    for level in summary["levels"].values():
        point, lo, hi = level["gap"]
        assert lo <= point <= hi and point == pytest.approx(level["r_plus"][0] - level["r0"][0], abs=1e-12)
    assert "R+ − R0" in out and "R+ − R0" in (tmp_path / "report.md").read_text()
    for attack in ("typo_evid", "nat_evid"):
        rug = summary["text"][attack]["rug"]["models"][0]
        assert rug["rug"] == pytest.approx(rug["p_read"] - rug["p_use"])
        assert summary["text"][attack]["oar"]["models"][0]["oar"] > 0
    assert summary["recovery"]["models"] or summary["models"][0]["asr"]["end_pgd"] == 0
    assert summary["ocr"]["checked"] == 4
    for title in ("RUG, Typo-Evid", "OAR, Nat-Evid", "Evidence preservation, Nat-Evid"):
        assert title in out
    report = (tmp_path / "report.md").read_text()
    assert "## Examples: Nat-Evid" in report and "OCR evidence check" in report
    for items in summary["examples"].values():
        for x in items:
            assert (tmp_path / x["clean_image"]).exists() and (tmp_path / x["attacked_image"]).exists()


def test_union_schedule_keeps_r0_r_plus_and_delta_with_fewer_passes(tmp_path):
    common = ("--data", "synthetic:4", "--steps", "6", "--attacks", "vis_pgd,end_pgd,mantis", "--recovery", "0")
    run(*common, "--out", str(tmp_path / "full"))
    out = run(*common, "--schedule", "union", "--out", str(tmp_path / "union"))
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    union = json.loads((tmp_path / "union" / "summary.json").read_text())
    (f,), (u,) = full["models"], union["models"]
    assert (u["r0"], u["r_plus"], u["delta"], u["asr"]["end_pgd"]) == (f["r0"], f["r_plus"], f["delta"],
                                                                       f["asr"]["end_pgd"])
    assert u["asr"]["vis_pgd"] <= f["asr"]["vis_pgd"] and u["asr"]["mantis"] <= f["asr"]["mantis"]
    passes = {name: sum(json.loads(x)["passes"] for x in (tmp_path / name / "results.jsonl").read_text().splitlines()
                        if json.loads(x)["kind"] == "attack") for name in ("full", "union")}
    assert passes["union"] < passes["full"]
    assert union["schedule"] == "union" and "lower bounds" in out


def imports_of(path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_the_audit_package_points_one_way_and_pathways_never_import_it():
    """config -> plan -> units -> evidence -> executors -> driver -> transfer -> sweep: each module
    imports only those before it, and nothing under mmaudit.pathways imports the audit, the command line or the run
    store (no driver code there)."""
    from pathlib import Path

    import mmaudit

    root = Path(mmaudit.__file__).parent
    floors = ["config", "plan", "units", "evidence", "executors", "driver", "transfer", "sweep"]
    assert {p.stem for p in (root / "audit").glob("*.py")} == {"__init__", *floors}
    for k, name in enumerate(floors):
        above = {f"mmaudit.audit.{f}" for f in floors[k + 1 :]} | {"mmaudit.audit", "mmaudit.cli"}
        assert not imports_of(root / "audit" / f"{name}.py") & above, name
    for path in (root / "pathways").rglob("*.py"):
        banned = ("mmaudit.audit", "mmaudit.cli", "mmaudit.store")
        assert not {m for m in imports_of(path) if m.startswith(banned)}, path


def test_wrong_answers_are_fixed_once_by_the_plan_before_any_executor_sees_a_sample(monkeypatch, tmp_path):
    from mmaudit.audit import AuditConfig, run_audit
    from mmaudit.audit import executors as ex
    from mmaudit.models.zoo.adapter import load_zoo
    from mmaudit.pathways import wrong

    samples = synthetic_set(2, seed=10_000, families=FAMILIES)
    assert not any("wrong_answer" in s.meta for s in samples)
    chosen, seen = [], []
    real_choose, real_init = wrong.choose_wrong, ex.Worker.__init__
    monkeypatch.setattr(wrong, "choose_wrong", lambda s, *a, **k: chosen.append(s.id) or real_choose(s, *a, **k))

    def init(self, model, samples, *a, **k):
        seen.append([s.meta.get("wrong_answer") for s in samples])
        real_init(self, model, samples, *a, **k)

    monkeypatch.setattr(ex.Worker, "__init__", init)
    cfg = AuditConfig(attacks=["mantis", "typo_evid"], steps=2, recovery=0, ocr_limit=0)
    run_audit([load_zoo("L1"), load_zoo("L2")], samples, tmp_path, cfg)
    assert sorted(chosen) == sorted(s.id for s in samples)  # once per sample, not once per model or executor
    assert len(seen) == 2 and all(w is not None for ws in seen for w in ws) and seen[0] == seen[1]
