"""Reports rebuilt from the run store alone: risk tables, diagnostics, examples."""

from __future__ import annotations

from mmaudit.report.channels import channel_summary
from mmaudit.report.diagnostics import examples, ocr_summary, recovery_summary, text_diagnostics
from mmaudit.report.headline import headline
from mmaudit.report.markdown import write_report
from mmaudit.report.masking import masking_check, member_table
from mmaudit.report.risk import model_flags, risk_summary, wanted
from mmaudit.report.tables import all_tables, table_rows
from mmaudit.report.transfer import transfer_summary
from mmaudit.report.validity import clean_validity
from mmaudit.store import RunStore


def reply_errors(store: RunStore, attack_params: dict[str, dict] | None) -> list[dict]:
    """A black-box target's replies that were no plain answer (failed, empty, a refusal), each named by sample,
    model and prompt; a failed clean request took its sample out of that model's C."""
    out = []
    for kind in ("clean", "attack", "transfer"):
        for r in store.records(kind):
            if r.get("reply_error") and (kind == "clean" or wanted(r, attack_params)):
                what = "clean" if kind == "clean" else r["attack"] + (f" from {r['source']}" if kind == "transfer"
                                                                       else "")
                out.append({"sample": r["sample"], "field": f"{r['model']} reply ({what})",
                            "reason": r["reply_error"] + ("; out of C" if kind == "clean" and r.get("failed") else "")})
    return out


def summarise(store: RunStore, attack_params: dict[str, dict] | None = None, n_boot: int = 10_000,
              seed: int = 0, strength: dict | None = None) -> dict:
    """Everything the report shows, as one JSON-able dict (written to summary.json); ``strength``: how hard the
    pixel attacks tried (the run record's preset)."""
    summary = risk_summary(store, attack_params, n_boot, seed)
    summary["strength"] = strength
    summary["errors"] = [{"sample": r["sample"], "field": r["field"], "reason": r["reason"]}
                         for r in store.records("error")] + reply_errors(store, attack_params)
    summary["text"] = text_diagnostics(store, attack_params, n_boot, seed)
    summary["recovery"] = recovery_summary(store, n_boot, seed)
    summary["ocr"] = ocr_summary(store)
    summary["examples"] = examples(store, attack_params)
    summary["validity"] = clean_validity(store)
    summary["masking"] = masking_check(store, attack_params)
    summary["members"] = member_table(store, attack_params)
    summary["transfer"] = transfer_summary(store, attack_params, n_boot, seed)
    summary["channels"] = channel_summary(store, attack_params, n_boot, seed)
    summary["endpoint_checks"] = list({r["fingerprint"]: r for r in store.records("endpoint_check")}.values())
    summary["headline"] = headline(summary)
    summary["bootstrap"] = {"replicates": n_boot, "seed": seed,
                            "resampled": "risk: questions, models fixed; diagnostics: each model's samples"}
    return summary


def all_warnings(summary: dict) -> list[str]:
    """Every warning the run's figures carry: validity, gradient masking, a pipeline that only looks robust."""
    return (list(summary["validity"]["warnings"]) + (summary.get("masking") or {}).get("warnings", [])
            + (summary.get("channels") or {}).get("warnings", []))


__all__ = ["all_warnings", "all_tables", "model_flags", "summarise", "table_rows", "write_report"]
