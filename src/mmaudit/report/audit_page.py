"""The audit's HTML page: Table 1 with CIs and the R+ − R0 gap, the plots the paper reads, a gallery per
attack (clean | attacked | perturbation or edit box | attention heat map), errors, and what the run was."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from mmaudit.pathways import registry
from mmaudit.report import plots
from mmaudit.report.html import Page, Raw, esc, figure, link, png_uri, read_rgb, runs_html, table
from mmaudit.report.markdown import intro, member_rows, union_note, validity_rows
from mmaudit.report.risk import wanted
from mmaudit.report.tables import all_tables, ci, moved_text, pct
from mmaudit.report.transfer import cell_name, transfer_tables
from mmaudit.store import RunStore


def _tables(summary: dict) -> str:
    parts = [f"<p class=\"note\">{esc(intro(summary))}</p>"]
    if summary.get("schedule") == "union":
        parts.append(f"<p class=\"warn\">{esc(union_note(summary))}</p>")
    for title, head, rows in all_tables(summary):
        parts.append(f"<h3>{esc(title)}</h3>" + table(head, rows, macro=[" macro (" in r[0] for r in rows]))
    parts += [f"<p class=\"warn channel-warning\">{esc(w)}</p>"
              for w in (summary.get("channels") or {}).get("warnings", [])]
    rk = summary.get("ranking")
    if rk:
        parts.append(f"<p>End-PGD vs R+ ranking over {rk['n_models']} models: Spearman ρ {rk['spearman_rho']:.3f}, "
                     f"Kendall τ-b {rk['kendall_tau_b']:.3f}; {rk['n_moved']} moved {moved_text(rk)}"
                     + (f" ({esc(', '.join(rk['moved']))})" if rk["moved"] else "") + ".</p>")
    return "".join(parts)


def _headline(summary: dict) -> str:
    h = summary.get("headline")
    if not h:
        return "<p class=\"note\">No headline (a run summarised before the headline existed).</p>"
    gap = "gap" not in (summary.get("coverage") or {}).get("not_measured", ())
    rows = [[r["level"], str(r["n_models"]), pct(r["clean"]), ", ".join(str(n) for n in r["n_correct"]), ci(r["r0"]),
             ci(r["r_plus"]), ci(r["gap"]) if gap else "not measured"] for r in h["levels"]]
    items = "".join(f"<li>{esc(s)}</li>" for s in h["sentences"])
    return (f"<div class=\"headline\"><ul class=\"headline-sentences\">{items}</ul>"
            + table(["level", "models", "clean %", "|C|", "R0 % [95% CI]", "R+ % [95% CI]", "R+ − R0 [95% CI]"], rows)
            + "</div>")


def _validity(summary: dict) -> str:
    v = summary.get("validity")
    if not v:
        return "<p class=\"note\">Not checked (a run made before the check existed).</p>"
    head, rows = validity_rows(v)
    warn = "".join(f"<p class=\"warn validity-warning\">{esc(w)}</p>" for w in v["warnings"])
    ok = "" if warn else "<p>Clean accuracy is above the check's threshold for every model and dataset.</p>"
    return (warn + ok + "<p class=\"note\">Every number below is conditioned on the clean-correct set: a clean "
            "accuracy far below what the model scores elsewhere means the model was not shown what its own "
            "pipeline shows it.</p>" + table(head, rows))


def _members(summary: dict) -> str:
    """The strong preset's ensembles, member by member, and the gradient-masking warnings."""
    head, rows = member_rows(summary)
    warn = "".join(f"<p class=\"warn masking-warning\">{esc(w)}</p>"
                   for w in (summary.get("masking") or {}).get("warnings", []))
    return warn + ("<p class=\"note\">Each member runs on what the earlier ones left; the last, Square, reads "
                   "only the loss.</p>" + table(head, rows) if rows else "")


def with_ci(row: dict, key: str) -> tuple[float, float, float]:
    """(point, low, high) of a model's statistic; a store summarised before model CIs existed shows none."""
    lo, hi = row.get(f"{key}_ci") or (row[key], row[key])
    return row[key], lo, hi


def _plots(summary: dict) -> str:
    why = plots.available()
    if why:
        return f"<p class=\"warn\">{esc(why)}</p>"
    figs = []
    attacks, levels, models = summary["attacks"], summary["levels"], summary["models"]
    if levels and attacks:
        keys = [f"asr_{a}" for a in attacks] + ["r0", "r_plus", "gap"]
        groups = [registry.display(a) for a in attacks] + ["R0", "R+", "R+ − R0"]
        figs.append(figure(plots.bars(groups, {lv: [m[k] for k in keys] for lv, m in levels.items()},
                                      "% of C", "ASR per attack per level (95% CI)"),
                           "Attack success per attack and level: macro over the level's models, whiskers the "
                           "percentile bootstrap CI; R+ − R0 is the risk the baselines miss."))
    if models:
        names = [f"{m['model']} ({m['level']})" for m in models]
        figs.append(figure(plots.dumbbell(names, [m["r0"] for m in models], [m["r_plus"] for m in models],
                                          ("R0 (baselines)", "R+ (all attacks)"), "R0 → R+ per model"),
                           "Each model's residual risk under the baselines (R0) and under every attack (R+)."))
    rk = summary.get("ranking")
    ranked = [m for m in models if "end_pgd" not in m.get("not_run", {})]  # a black-box target has no End-PGD
    if rk and len(ranked) > 1:
        names = [m["model"] for m in ranked]
        figs.append(figure(plots.slope(names, [m["asr"]["end_pgd"] for m in ranked],
                                       [m["r_plus"] for m in ranked], ("End-PGD", "R+"), rk["moved"],
                                       "Who moves: End-PGD rank vs R+ rank"),
                           f"Rank by End-PGD ASR (left) and by R+ (right); red: moved {moved_text(rk)} "
                           f"(Spearman ρ {rk['spearman_rho']:.2f})."))
    rec = summary.get("recovery", {})
    series = {f"{m['model']} ({m['level']})": m["by_layer"] for m in rec.get("models", []) if m.get("by_layer")}
    if series:
        figs.append(figure(plots.lines(series, "relative depth of the patched layer (0 = first)",
                                       "% of flips recovered", "Layer recovery by depth"),
                           "Share of reproduced End-PGD flips whose clean answer returns when the clean hidden "
                           "states are patched in at that layer."))
    for attack, d in summary.get("text", {}).items():
        name = registry.display(attack)
        rows = d["rug"]["models"]
        figs.append(figure(plots.bars([r["model"] for r in rows],
                                      {"P_read": [with_ci(r, "p_read") for r in rows],
                                       "P_use": [with_ci(r, "p_use") for r in rows]}, "% of overlays",
                                      f"RUG, {name}: read vs used (95% CI)"),
                           f"{name}: how often the model reads the overlaid text (P_read) and how often its wrong "
                           "answer uses it (P_use); RUG is the gap. Whiskers: each model's bootstrap CI."))
        rows = d["oar"]["models"]
        if rows:  # none where every target was black-box
            figs.append(figure(plots.bars([r["model"] for r in rows],
                                          {"attacked": [with_ci(r, "oar") for r in rows],
                                           "clean (same region)": [with_ci(r, "oar_clean") for r in rows]}, "OAR",
                                          f"OAR, {name}: clean vs attacked (95% CI)", scale=1.0, ref=1.0),
                               f"{name}: overlay attention ratio on the attacked image and on the same region of the "
                               "clean image (dashed: attention spread evenly, OAR 1)."))
    return f"<div class=\"figs\">{''.join(figs)}</div>" if figs else "<p>No data to plot.</p>"


def _perturbation(clean: np.ndarray, adv: np.ndarray, eps: float | None) -> np.ndarray:
    """adv − clean, amplified so ±eps spans black to white (grey is no change)."""
    d = adv.astype(float) - clean.astype(float)
    span = 255 * (eps or max(1e-6, np.abs(d).max() / 255))
    return np.clip(127.5 + 127.5 * d / max(span, 1e-6), 0, 255).astype(np.uint8)


def _boxed(image: np.ndarray, box) -> np.ndarray:
    im = Image.fromarray(image)
    if box:
        ImageDraw.Draw(im).rectangle([float(v) for v in box], outline=(0, 229, 255), width=max(1, im.width // 96))
    return np.asarray(im)


def _card(run: Path, attack: str, x: dict) -> str:
    clean, adv = read_rgb(run, x.get("clean_image")), read_rgb(run, x.get("attacked_image"))
    pics = []
    if clean is not None:
        pics.append(figure(png_uri(clean), "clean"))
    if adv is not None:
        if registry.is_pixel(attack):
            pics.append(figure(png_uri(adv), "adversarial"))
            if clean is not None and clean.shape == adv.shape:
                amp = f"perturbation ×{0.5 / x['eps']:.0f}" if x.get("eps") else "perturbation (scaled)"
                pics.append(figure(png_uri(_perturbation(clean, adv, x.get("eps"))), amp))
        else:
            pics.append(figure(png_uri(_boxed(adv, x.get("box"))), "edited (overlay box outlined)"))
            if x.get("attention_map") and plots.available() is None:
                pics.append(figure(plots.attention_overlay(adv, x["attention_map"], x.get("box"),
                                                           f"attention, OAR {x.get('oar') or float('nan'):.2f}"),
                                   "attention over the image (1 = even)"))
    if not pics:
        pics.append("<p class=\"note\">images not in the run folder</p>")
    facts = [("model", x["model"]), ("sample", x["sample"]), ("question", x["question"]),
             ("reference", x["reference"]), ("clean answer", x["clean_answer"]),
             ("attacked answer", x["attacked_answer"])]
    if x.get("overlay"):
        facts.append(("overlay text", x["overlay"]))
    if x.get("linf") is not None:
        facts.append(("L∞", f"{x['linf']:.4f}" + (f" (ε {x['eps']:.4f})" if x.get("eps") else "")))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    return f"<div class=\"card\"><div class=\"imgs\">{''.join(pics)}</div><dl>{dl}</dl></div>"


def _galleries(run: Path, summary: dict) -> str:
    parts = []
    ex = summary.get("examples", {})
    for attack in sorted(ex, key=registry.table_rank):
        items = ex[attack]
        parts.append(f"<h3>{esc(registry.display(attack))}</h3><div class=\"gallery\">"
                     + "".join(_card(run, attack, x) for x in items) + "</div>")
    return "".join(parts) or "<p>No flips to show.</p>"


def _oar_figure(run: Path, summary: dict) -> str:
    """The paper's Figure 3: attention over attacked images with the overlay outlined."""
    if plots.available():
        return f"<p class=\"warn\">{esc(plots.available())}</p>"
    figs = []
    for attack in registry.names("text"):
        for x in summary.get("examples", {}).get(attack, []):
            adv = read_rgb(run, x.get("attacked_image"))
            if adv is not None and x.get("attention_map"):
                figs.append(figure(plots.attention_overlay(adv, x["attention_map"], x.get("box"),
                                                           f"{registry.display(attack)} · {x['model']}"),
                                   f"{x['model']}, {x['sample']}: OAR {x.get('oar') or float('nan'):.2f}; cyan: "
                                   f"overlay region"))
    if not figs:
        return "<p class=\"note\">No attention maps stored (runs made before attention maps were recorded).</p>"
    return ("<p class=\"note\">Attention from the answer's text tokens to the image patches (later decoder layers, "
            "heads averaged), as a multiple of even attention; the overlay region is outlined.</p>"
            f"<div class=\"figs\">{''.join(figs)}</div>")


def _transfer(run: Path, summary: dict) -> str:
    """The source x target matrix as a heat map and a table, the black-box R+ per target, and transferred images
    that flipped a target."""
    t = summary.get("transfer")
    if not t:
        return ("<p class=\"note\">No transfer results: <code>mmaudit audit transfer RUN [--to SPEC]</code> shows "
                "this run's adversarial images to every audited model (and to endpoint targets).</p>")
    (mtitle, mhead, mrows), (rtitle, rhead, rrows) = transfer_tables(summary)
    parts = []
    if plots.available() is None:
        targets = mhead[1:]
        cells = {(cell_name(c["source"], c["attack"]), c["target"]): c["asr"][0] * 100 for c in t["matrix"]}
        grid = np.array([[cells.get((r[0], x), np.nan) for x in targets] for r in mrows], float)
        parts.append("<div class=\"figs\">" + figure(plots.heatmap(grid, [r[0] for r in mrows], targets,
                                                                    "Transfer ASR (% of the target's C)"),
                                                      "Rows: source model and pixel attack; columns: targets; "
                                                      "the diagonal is each model's white-box ASR.") + "</div>")
    parts.append(f"<h3>{esc(mtitle)}</h3>" + table(mhead, mrows))
    parts.append(f"<h3>{esc(rtitle)}</h3>" + table(rhead, rrows))
    cards = []
    for x in t["examples"]:
        clean, adv = read_rgb(run, x.get("clean_image")), read_rgb(run, x.get("attacked_image"))
        pics = [figure(png_uri(im), label) for im, label in ((clean, "clean"), (adv, f"from {x['source']}"))
                if im is not None]
        facts = [("source · attack", cell_name(x["source"], x["attack"])), ("target", x["target"]),
                 ("sample", x["sample"]), ("question", x["question"]), ("reference", x["reference"]),
                 ("target's clean answer", x["clean_answer"]), ("target's answer on the image", x["attacked_answer"])]
        dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
        cards.append(f"<div class=\"card\"><div class=\"imgs\">{''.join(pics)}</div><dl>{dl}</dl></div>")
    parts.append("<h3>Transferred images that flipped a target</h3>"
                 + (f"<div class=\"gallery\">{''.join(cards)}</div>" if cards else "<p>None.</p>"))
    return "".join(parts)


def _run(summary: dict, runs: list[dict]) -> str:
    parts = [runs_html(runs, skip=("attack_params",))]
    audits = [r for r in runs if r["command"] == "audit"]
    if audits:
        parts.append("<h3>Attack parameters</h3>" + table(["attack", "parameters"], [
            [registry.display(a), json.dumps(p, sort_keys=True)] for a, p in audits[-1]["params"].get("attack_params",
                                                                                                 {}).items()]))
    b = summary["bootstrap"]
    parts.append(f"<p class=\"note\">Bootstrap: {b['replicates']} replicates, seed {b['seed']} ({esc(b['resampled'])})."
                 "</p>")
    return "".join(parts)


def _flipped(store: RunStore, params: dict | None) -> dict[tuple[str, str], list[dict]]:
    """(sample, model fingerprint) -> the attack records that flipped it, in attack order."""
    flips: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in sorted(store.records("attack"), key=lambda r: registry.table_rank(r["attack"])):
        if r["flipped"] and wanted(r, params):
            flips[(r["sample"], r["fingerprint"])].append(r)
    return flips


def _samples(store: RunStore, params: dict | None, page: int = 50) -> str:
    """Every sample: its question and reference, and per model the clean answer and, for each attack that flipped
    it, the attacked answer with a link to the attacked image."""
    clean: dict[str, dict[str, dict]] = defaultdict(dict)
    models: dict[str, str] = {}
    for r in store.records("clean"):
        clean[r["sample"]][r["fingerprint"]] = r
        models[r["fingerprint"]] = r["model"]
    flips = _flipped(store, params)
    fps = sorted(models, key=lambda f: models[f])
    rows = []
    for sid in sorted(clean):
        first = next(iter(clean[sid].values()))
        row = [sid, first.get("family", ""), first.get("question", ""), first.get("reference", "")]
        for fp in fps:
            c = clean[sid].get(fp)
            if c is None:
                row.append("")
                continue
            parts = [f"{'✓' if c['correct'] else '✗'} {esc(c['answer'])}"] + [
                f"{esc(registry.display(r['attack']))}: {esc(r['answer'])} ({link(r.get('image'), 'image')})"
                for r in flips.get((sid, fp), [])]
            row.append(Raw("<br>".join(parts)))
        rows.append(row)
    return ("<p class=\"note\">Per model: ✓/✗ the clean answer judged correct, then each attack that flipped it, "
            "with the attacked answer and its image (a file of the run folder).</p>"
            "<input class=\"filter\" data-target=\"samples-table\" placeholder=\"filter samples (needs script)\">"
            + table(["sample", "family", "question", "reference", *(models[f] for f in fps)], rows,
                    ident="samples-table", page=page))


def _all_flips(store: RunStore, params: dict | None, page: int = 25) -> str:
    """Every flip of the run, to page or filter through: model, attack, the sample, both answers, both images."""
    clean = {(r["fingerprint"], r["sample"]): r for r in store.records("clean")}
    rows = []
    for (sid, fp), recs in sorted(_flipped(store, params).items()):
        c = clean.get((fp, sid), {})
        for r in recs:
            rows.append([r["model"], r["level"], registry.display(r["attack"]), sid, r.get("question", ""),
                         r["reference"], c.get("answer", ""), r["answer"], r.get("overlay") or "",
                         Raw(f"{link(c.get('image'), 'clean')} {link(r.get('image'), 'attacked')}")])
    if not rows:
        return "<p>No flips.</p>"
    return (f"<p class=\"note\">All {len(rows)} flips; type to filter (a model, an attack, a word of the question "
            "or an answer), page with the buttons.</p>"
            "<input class=\"filter\" data-target=\"flips-table\" placeholder=\"filter flips (needs script)\">"
            + table(["model", "level", "attack", "sample", "question", "reference", "clean answer", "attacked answer",
                     "overlay", "images"], rows, ident="flips-table", page=page))


def audit_page(run: Path, summary: dict, runs: list[dict], store: RunStore, params: dict | None) -> str:
    models = summary["models"]
    page = Page("FusionAudit report", f"{len(models)} models · {len({m['level'] for m in models})} levels · "
                f"{max((m['n'] for m in models), default=0)} questions · run folder {run.name}")
    page.add("headline", "Headline", _headline(summary))
    page.add("validity", "Validity", _validity(summary))
    if summary.get("members"):
        page.add("members", "Ensemble members", _members(summary))
    page.add("risk", "Residual risk", _tables(summary))
    page.add("plots", "Plots", _plots(summary))
    page.add("gallery", "Galleries", _galleries(run, summary))
    page.add("flips", "All flips", _all_flips(store, params))
    page.add("transfer", "Transfer", _transfer(run, summary))
    page.add("oar", "Where the model looks (OAR)", _oar_figure(run, summary))
    page.add("samples", "Samples", _samples(store, params))
    errs = summary["errors"]
    page.add("errors", f"Errors ({len(errs)})", table(["sample", "field", "reason"],
                                                      [[e["sample"], e["field"], e["reason"]] for e in errs])
             if errs else "<p>None: every sample was audited.</p>")
    page.add("run", "Run", _run(summary, runs))
    return page.render()
