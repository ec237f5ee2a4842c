"""`audit sweep`'s reports (sweep.json, report.md, report.html): MANTIS ASR over seeds x steps x eps, rebuilt
from the sweep's store; its grid comes from the run record, else from the records themselves."""

from __future__ import annotations

from pathlib import Path

from mmaudit.jsonout import dumps
from mmaudit.manifest import invocations
from mmaudit.report import plots
from mmaudit.report.html import Page, esc, figure, runs_html, table
from mmaudit.report.markdown import md_table
from mmaudit.store import RunStore


def sweep_config(store: RunStore, runs: list[dict]):
    from mmaudit.audit.sweep import SweepConfig

    if runs:
        p = runs[-1]["params"]
        return SweepConfig(seeds=p["seeds"], steps=p["steps"], eps=p["eps"])
    recs = list(store.records("sweep"))
    return SweepConfig(seeds=sorted({r["seed"] for r in recs}), eps=sorted({float(r["eps"]) for r in recs}),
                       steps=sorted({int(b) for r in recs for b in r["flipped_at"]}))


def sweep_tables(s: dict) -> tuple[list[str], list[list[str]]]:
    head = ["model", "level", "eps"] + [f"{b} steps" for b in s["budgets"]]
    rows = [[m["model"], m["level"], e] + [f"{100 * mu:.1f} ± {100 * sd:.1f}" for mu, sd in zip(m["asr_mean"][j],
                                                                                         m["asr_std"][j])]
            for m in s["models"] for j, e in enumerate(s["eps"])]
    rows += [[f"{lv} mean", lv, e] + [f"{100 * v:.1f}" for v in vals[j]]
             for lv, vals in s["levels"].items() for j, e in enumerate(s["eps"])]
    return head, rows


def sweep_lines(s: dict) -> list[str]:
    """The sweep's findings in words (terminal and both reports)."""
    main = s["main_setting"]
    out = [f"median std across seeds: {100 * s['median_std_main']:.1f} points at eps {main['eps']}, "
           f"{main['steps']} steps; {100 * s['median_std_all']:.1f} over every setting"]
    if s["gain_40_to_50"]:
        out.append("gain from 40 to 50 steps: " + ", ".join(f"{lv} {100 * g:+.1f}"
                                                           for lv, g in s["gain_40_to_50"].items()))
    out.append("level order at 40 steps: " + "; ".join(f"eps {e}: {o}" for e, o in s["level_order"].items())
               + f" -> {'the same at every eps' if s['order_holds'] else 'NOT the same at every eps'}")
    return out


def rebuild_sweep(run: Path) -> tuple[dict, list[Path]]:
    from mmaudit.audit.sweep import summarise_sweep

    store = RunStore(run / "results.jsonl")
    runs = [r for r in invocations(store) if r["command"] == "audit sweep"]
    s = summarise_sweep(store, sweep_config(store, runs))
    (run / "sweep.json").write_text(dumps(s, indent=2))
    head, rows = sweep_tables(s)
    title = f"MANTIS ASR % (mean ± std over seeds {s['seeds']})"
    md = run / "report.md"
    md.write_text("\n".join(["# MANTIS stability sweep", "", *sweep_lines(s), *md_table(title, head, rows)]) + "\n")
    page = Page("MANTIS stability sweep", f"{len(s['models'])} models · seeds {s['seeds']} · run folder {run.name}")
    page.add("table", "ASR over seeds, steps and eps", "".join(f"<p>{esc(x)}</p>" for x in sweep_lines(s))
             + table(head, rows, macro=[r[0].endswith(" mean") for r in rows]))
    if plots.available():
        figs = f"<p class=\"warn\">{esc(plots.available())}</p>"
    else:
        figs = "".join(figure(plots.lines({f"eps {e}": m["asr_mean"][j] for j, e in enumerate(s["eps"])},
                                          "steps (" + ", ".join(map(str, s["budgets"])) + ")", "ASR % (mean of seeds)",
                                          f"{m['model']} ({m['level']})"),
                              f"{m['model']}: MANTIS ASR by step budget, one line per eps")
                       for m in s["models"])
    page.add("plots", "Plots", f"<div class=\"figs\">{figs}</div>")
    page.add("run", "Run", runs_html(runs))
    html_path = run / "report.html"
    html_path.write_text(page.render())
    return s, [md, html_path]
