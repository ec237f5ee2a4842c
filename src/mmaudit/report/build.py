"""`mmaudit report RUN`: rebuild a run's report.md and report.html from the run folder alone.

The kind of run is read off the folder: an audit's or a sweep's store (``results.jsonl``) or a bench run's
judged files (``evaluation/judged``). What the run was (its parameters, seed, versions, timing) comes from
the run records in its store; a run made before those were kept is rebuilt with the attack parameters found
in its records."""

from __future__ import annotations

from pathlib import Path

from mmaudit.errors import FolderError
from mmaudit.manifest import invocations
from mmaudit.store import RunStore


def kind_of(run: Path) -> str:
    if (run / "evaluation" / "judged").is_dir():
        return "bench"
    store = run / "results.jsonl"
    if store.is_file():
        audit = False
        with store.open() as f:
            for line in f:  # a sweep's store holds clean records too: only sweep records tell them apart
                if '"kind": "sweep"' in line:
                    return "sweep"
                audit = audit or '"kind": "clean"' in line
        if audit:
            return "audit"
    raise FolderError(str(run), "run", "not a run folder: no results.jsonl with audit records and no "
                     "evaluation/judged files")


def found_params(store: RunStore) -> dict[str, dict]:
    """Attack parameters of a store without run records: each attack's one parameter set, or an error that
    says the store mixes several (the report would not know which to show)."""
    seen: dict[str, list[dict]] = {}
    for r in store.records("attack"):
        if r["params"] not in seen.setdefault(r["attack"], []):
            seen[r["attack"]].append(r["params"])
    mixed = [a for a, ps in seen.items() if len(ps) > 1]
    if mixed:
        raise FolderError(str(store.path), "params", f"several parameter sets for {', '.join(mixed)} and no run "
                         "record to say which one the report is about")
    return {a: ps[0] for a, ps in seen.items()}


def audit_summary(run: Path, n_boot: int | None = None) -> tuple[dict, RunStore, list[dict], dict]:
    """An audit run's summary from its store alone (nothing written): (summary, store, invocations, params)."""
    from mmaudit.report import summarise

    if kind_of(run) != "audit":
        raise FolderError(str(run), "run", "not an audit run folder (no results.jsonl with audit records)")
    store = RunStore(run / "results.jsonl")
    runs = [r for r in invocations(store) if r["command"] in ("audit", "audit transfer")]
    audits = [r for r in runs if r["command"] == "audit"]
    last = audits[-1]["params"] if audits else {}
    params = dict(last.get("attack_params") or found_params(store))
    crafted = [r["params"]["surrogate_params"] for r in runs if r["params"].get("surrogate_params")]
    if crafted:  # the latest transfer that crafted surrogate images: the report is about those
        params["surrogate"] = crafted[-1]
    summary = summarise(store, params, n_boot=n_boot or last.get("n_boot", 10_000), seed=last.get("seed", 0),
                        strength=strength_of(last, params))
    return summary, store, runs, params


def strength_of(run_params: dict, attack_params: dict) -> dict | None:
    """How hard the pixel attacks tried: the preset the run record names, else what the attack parameters say (a
    run from before presets existed); None when no pixel attack ran."""
    from mmaudit.pathways import registry

    pixel = [p for a, p in attack_params.items() if registry.is_pixel(a) and not registry.spec(a).transfer_only]
    if not pixel:
        return None
    members = {a: list(p["members"]) for a, p in attack_params.items() if isinstance(p, dict) and p.get("members")}
    odi = {a: p["odi"] for a, p in attack_params.items() if isinstance(p, dict) and p.get("odi")}
    extra = ({"members": members} if members else {}) | ({"odi": odi} if odi else {})
    if run_params.get("attack_strength"):
        return run_params["attack_strength"] | extra
    p = pixel[0]
    return {"preset": None, "optimiser": p.get("optimiser", "pgd"), "steps": p["steps"],
            "restarts": p.get("restarts", 1)} | extra


def rebuild_audit(run: Path, n_boot: int | None = None) -> tuple[dict, list[Path]]:
    from mmaudit.report import write_report
    from mmaudit.report.audit_page import audit_page

    summary, store, runs, params = audit_summary(run, n_boot)
    md = write_report(summary, run)
    page = run / "report.html"
    page.write_text(audit_page(run, summary, runs, store, params))
    return summary, [md, page]


def rebuild(run: Path, n_boot: int | None = None) -> tuple[dict, list[Path]]:
    """Write report.md and report.html (and summary.json) from the run folder; returns the summary and paths."""
    kind = kind_of(run)
    if kind == "audit":
        return rebuild_audit(run, n_boot)
    if kind == "sweep":
        from mmaudit.report.sweep_page import rebuild_sweep

        return rebuild_sweep(run)
    from mmaudit.report.bench_page import rebuild_bench

    return rebuild_bench(run, n_boot)
