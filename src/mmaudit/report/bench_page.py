"""The bench run's report.md and HTML page, rebuilt from the run folder: tables and plots from the judged
files, component health (unparsed outputs, distinct decisions, failures) from the run's summary.json, the
row browser from the judged files (passages from the benchmark folder the run read, when it is still there),
what the run was from its run records (runs.jsonl; the calls cache stays apart, it can be large)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from mmaudit.errors import FolderError, InputError, json_reason
from mmaudit.manifest import invocations
from mmaudit.rag.construct.records import IMAGE_ATTACKS
from mmaudit.rag.evaluate.methods import BRANCH_METHODS
from mmaudit.report import plots
from mmaudit.report.html import Page, esc, figure, png_uri, read_rgb, runs_html, table
from mmaudit.report.markdown import md_table
from mmaudit.store import RunStore

Table = tuple[str, list[str], list[list[str]]]
ROW_LIMIT = 240  # rows in the browser; the judged files hold them all
SYNTHETIC = ("SYNTHETIC FALSE STATEMENTS: this evidence was polluted on purpose by the benchmark; it is not "
             "true.")


def health_tables(summary: dict) -> list[Table]:
    """Unparsed outputs per component and distinct decisions per router, from a stack's summary."""
    unp = summary.get("unparsed", {})
    dd = summary.get("distinct_decisions", {})
    return [("Unparsed outputs per component (not the asked-for JSON; each falls back as documented)",
             ["component", "unparsed", "of"], [[k, str(v["unparsed"]), str(v["of"])] for k, v in unp.items()]),
            ("Distinct decisions per router (rows per final decision)", ["method", "distinct", "decisions"],
             [[m, str(len(d)), ", ".join(f"{k} {n}" for k, n in sorted(d.items()))] for m, d in dd.items()])]


def stack_summaries(run: Path) -> dict[str, dict]:
    """Each stack's summary block (one stack: the file itself; several: its 'stacks'); {} when absent."""
    path = run / "summary.json"
    if not path.is_file():
        return {}
    try:
        s = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FolderError(str(path), "summary", f"{json_reason(e)}, line {e.lineno}") from e
    if "stacks" in s:
        return s["stacks"]
    judged = run / "evaluation" / "judged"
    names = sorted(p.name for p in judged.iterdir() if p.is_dir())
    return {names[0]: s} if len(names) == 1 else {}


def block_lines(name: str, summary: dict, tabs: list[Table]) -> list[str]:
    """One stack's part of report.md."""
    lines = ["", f"# Stack {name}", ""]
    if summary:
        failed = sum(summary.get("failed_rows", {}).values())
        usage = summary.get("usage", {})
        spent = sum(u["cost"] for u in usage.values())
        tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage.values())
        lines += [*summary.get("notes", []), "",
                  f"{summary['rows']} rows, {summary['questions']} questions; judge calls {summary['judge_calls']}, "
                  f"unparsed verdicts {summary['unparsed_verdicts']} (scored uncertain).", "",
                  f"Failed requests: {failed} method-rows left unscored "
                  + (", ".join(f"{m} {n}" for m, n in summary["failed_rows"].items() if n) or "(none)") + ".",
                  "", f"Usage: {tokens} tokens, cost {spent:.4f}"
                  + (f" (budget {summary['budget']})" if summary.get("budget") else "") + "."]
    else:
        lines.append("No summary.json for this stack: component health and usage are not shown.")
    for title, head, rows in tabs:
        lines += md_table(title, head, rows)
    return lines


def _numbers_plots(name: str, n: dict, summary: dict) -> str:
    why = plots.available()
    if why:
        return f"<p class=\"warn\">{esc(why)}</p>"
    figs = []
    main = n["main"]
    methods = [r["method"] for r in main]
    ci = n["cis"]

    def tri(m: str, k: str, v: float):
        return tuple(ci[m][k]) if m in ci else (v, v, v)

    figs.append(figure(plots.bars(methods, {"TC (clean text)": [tri(r["method"], "tc", r["tc"]) for r in main],
                                            "TP (polluted text)": [tri(r["method"], "tp", r["tp"]) for r in main]},
                                  "support score %", f"TC vs TP per method ({name})"),
                       "Support score under clean (TC) and polluted (TP) text, macro over datasets; whiskers: "
                       "95% question-clustered bootstrap CI."))
    af = n["attack_family"]
    ms = sorted(af)
    figs.append(figure(plots.heatmap(np.array([[100 * af[m][a] for a in IMAGE_ATTACKS] for m in ms]), ms,
                                     IMAGE_ATTACKS, "TP_IP support % by image attack"),
                       "Attack family × method (G.3): support score under polluted text, per image pollution."))
    ch = n["channel"]
    ms = sorted(ch)
    figs.append(figure(plots.bars(ms, {"image effect": [(ch[m]["image_effect"],) * 3 for m in ms],
                                       "text effect": [(ch[m]["text_effect"],) * 3 for m in ms]}, "points",
                                  "Channel isolation", ref=0.0),
                       "Image effect = TC_IC − mean TC_IP; text effect = TC_IC − TP_IC (positive: the pollution "
                       "costs support)."))
    dec = n["decisions"]
    rows = [f"{m} · {g}" for m in sorted(dec) for g in ("TC", "TP") if dec[m] and dec[m].get(g)]
    shares = [dec[m][g] for m in sorted(dec) for g in ("TC", "TP") if dec[m] and dec[m].get(g)]
    if rows:
        figs.append(figure(plots.stacked(rows, shares, "Decision distribution per router"),
                           "Share of rows per final route, under clean (TC) and polluted (TP) text."))
    ra = {m: v for m, v in n["route_accuracy"].items() if v is not None}
    if ra:
        ms = sorted(ra)
        figs.append(figure(plots.bars(ms, {"overall": [(ra[m]["overall"],) * 3 for m in ms]}, "%",
                                      "Route accuracy"),
                           "Share of rows routed to the oracle's best branch (ties: any best branch)."))
    unp = summary.get("unparsed", {})
    if unp:
        comps = list(unp)
        figs.append(figure(plots.bars(comps, {"unparsed": [(v["unparsed"] / max(1, v["of"]),) * 3
                                                           for v in unp.values()]}, "% of replies",
                                      "Unparsed outputs per component"),
                           "Replies that were not the asked-for JSON (each falls back as documented)."))
    return f"<div class=\"figs\">{''.join(figs)}</div>"


def _folder_rows(folder: Path | None) -> dict[tuple, object]:
    """The benchmark's rows by (dataset, qid, regime), for passages and images; {} when unreadable."""
    if folder is None or not folder.is_dir():
        return {}
    from mmaudit.rag.construct.records import read_rows

    out = {}
    for f in sorted(folder.glob("*_qimg7_mm_regimes_*.jsonl")):
        for r in read_rows(f):
            if not isinstance(r, InputError):
                out[(r.dataset.lower(), str(r.qid), r.regime)] = r
    return out


def _evidence(r) -> str:
    if r is None:
        return ""
    polluted = r.text_status != "clean"
    passages = "".join(f"<li><b>{esc(t.title)}</b>: {esc(t.snippet)}</li>" for t in r.text_evidence)
    text = (f"<div class=\"synthetic\"><b>{esc(SYNTHETIC)}</b><ol>{passages}</ol></div>" if polluted
            else f"<ol>{passages}</ol>")
    im = r.image_evidence
    img = (f"<p><b>image</b>: {esc(im.title)} — {esc(im.alt_text)}"
           + (f" <span class=\"synthetic\"><b>synthetic image pollution: {esc(r.image_pollution_type)}</b></span>"
              if r.image_status != "clean" else "") + "</p>")
    return f"<details><summary>evidence</summary>{text}{img}</details>"


def _browser(name: str, per: dict, folder_rows: dict) -> str:
    rows: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for m, by in per.items():
        for ds, rs in by.items():
            for r in rs:
                rows[(ds, str(r["qid"]), r["regime"])][m] = r
    keys = sorted(rows)
    methods = [m for m in BRANCH_METHODS if m in per] + sorted(m for m in per if m not in BRANCH_METHODS)
    ident = f"rows-{name}"
    body = []
    for k in keys[:ROW_LIMIT]:
        got = rows[k]
        first = next(iter(got.values()))
        cells = [f"<td>{esc(k[0])}</td><td>{esc(k[1])}</td><td>{esc(k[2])}"
                 + (" <b class=\"synthetic\">polluted text</b>" if k[2].startswith("TP") else "") + "</td>",
                 f"<td class=\"ans\">{esc(first['question'])}{_evidence(folder_rows.get(k))}</td>"]
        for m in methods:
            r = got.get(m)
            if r is None:
                cells.append("<td></td>")
                continue
            route = "" if m in BRANCH_METHODS else f"<b>{esc(r.get('route'))}</b><br>"
            cells.append(f"<td class=\"ans\">{route}{esc(r.get('answer'))}<br><i>{esc(r.get('label'))}</i></td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in ["dataset", "qid", "regime", "question", *methods])
    more = (f"<p class=\"note\">Showing {ROW_LIMIT} of {len(keys)} rows; every row is in evaluation/judged/"
            f"{esc(name)}.</p>" if len(keys) > ROW_LIMIT else "")
    return (f"<p class=\"note\">Each cell: the method's route (routers), its answer and the judge's label. Polluted "
            "text and images are synthetic false statements made by the benchmark.</p>"
            f"<input class=\"filter\" data-target=\"{esc(ident)}\" placeholder=\"filter rows (needs script)\">"
            f"{more}<table class=\"sortable\" id=\"{esc(ident)}\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _regime_strip(folder: Path | None, folder_rows: dict) -> str:
    """The image regimes of the first question: clean and each pollution, as the models saw them."""
    if not folder_rows or folder is None:
        return ""
    first = min(folder_rows)[:2]
    figs = []
    for (ds, qid, regime), r in sorted(folder_rows.items()):
        if (ds, qid) != first or not regime.startswith("TC_"):
            continue
        im = read_rgb(folder, r.image_evidence.local_path)
        if im is not None:
            label = "clean image" if r.image_status == "clean" else f"synthetic pollution: {r.image_pollution_type}"
            figs.append(figure(png_uri(im, 200), label))
    if not figs:
        return ""
    return (f"<h3>Image regimes of question {esc(first[1])} ({esc(first[0])})</h3>"
            f"<div class=\"figs\">{''.join(figs)}</div>")


def _run_section(runs: list[dict], summaries: dict[str, dict]) -> str:
    parts = [runs_html(runs)]
    for name, s in summaries.items():
        usage = [[who] + [str(u.get(k, "")) for k in ("calls", "cached", "retries", "failed", "prompt_tokens",
                                                       "completion_tokens", "cost")]
                 for who, u in s.get("usage", {}).items()]
        if usage:
            parts.append(f"<h3>Usage, stack {esc(name)}</h3>" + table(
                ["model", "calls", "cached", "retries", "failed", "prompt tokens", "completion tokens", "cost"],
                usage))
        if s.get("failures"):
            parts.append(table(["failure (first 20)"], [[f] for f in s["failures"]]))
    return "".join(parts)


def rebuild_bench(run: Path, n_boot: int | None = None, seed: int | None = None) -> tuple[dict, list[Path]]:
    from mmaudit.rag.evaluate.tables import bench_numbers, bench_tables

    runs = invocations(RunStore(run / "runs.jsonl")) if (run / "runs.jsonl").is_file() else []
    last = runs[-1]["params"] if runs else {}
    n_boot = n_boot if n_boot is not None else last.get("n_boot", 10_000)
    seed = seed if seed is not None else last.get("seed", 0)
    summaries = stack_summaries(run)
    stacks = sorted(p.name for p in (run / "evaluation" / "judged").iterdir() if p.is_dir())
    folder = Path(last["folder"]) if last.get("folder") else None
    folder_rows = _folder_rows(folder)
    page = Page("QIMG-7 + SATR report", f"{len(stacks)} stack{'s' if len(stacks) != 1 else ''} · run folder "
                f"{run.name}" + (f" · benchmark {folder}" if folder else ""))
    judges = {s.get("judge") for s in summaries.values()}
    one = f", one judge: {next(iter(judges))}" if len(stacks) > 1 and len(judges) == 1 and None not in judges else ""
    lines = [f"# QIMG-7 run ({len(stacks)} stack{'s' if len(stacks) != 1 else ''}{one})"]
    tables = {}
    for name in stacks:
        s = summaries.get(name, {})
        n = bench_numbers(run, name, n_boot, seed)
        tabs = tables[name] = bench_tables(run, name, n_boot, seed, numbers=n) + (health_tables(s) if s else [])
        lines += block_lines(name, s, tabs)
        notes = "".join(f"<p class=\"note\">{esc(x)}</p>" for x in s.get("notes", []))
        if not s:
            notes += "<p class=\"warn\">No summary.json for this stack: component health and usage not shown.</p>"
        page.add(f"tables-{name}", f"Tables · {name}", notes + "".join(
            f"<h3>{esc(t)}</h3>" + table(h, r) for t, h, r in tabs))
        page.add(f"plots-{name}", f"Plots · {name}", _numbers_plots(name, n, s))
        page.add(f"rows-{name}", f"Row browser · {name}", _browser(name, n["per"], folder_rows))
    strip = _regime_strip(folder, folder_rows)
    if strip:
        page.add("images", "Image regimes", strip)
    elif folder:
        page.add("images", "Image regimes", f"<p class=\"note\">The benchmark folder {esc(folder)} is not "
                 "readable here: passages and images are not shown.</p>")
    page.add("run", "Run", _run_section(runs, summaries))
    md, html_path = run / "report.md", run / "report.html"
    md.write_text("\n".join(lines) + "\n")
    html_path.write_text(page.render())
    return {"stacks": {k: summaries.get(k, {}) for k in stacks}, "tables": tables}, [md, html_path]
