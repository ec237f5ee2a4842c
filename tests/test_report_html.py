"""`mmaudit report`: report.md and one self-contained report.html rebuilt from a run folder alone, for an
audit and a bench run; hostile sample ids and questions stay text, in the file and in a real browser."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.io import write_samples
from mmaudit.data.synthetic import FAMILIES, synthetic_set

# Each payload, if it ever ran, would mark the page's <body>; the browser test looks for the marks.
ID_PAYLOAD = '<img src=x onerror="document.body.dataset.pwned=1">|`'
QUESTION_PAYLOAD = "<script>document.body.dataset.pwned=2</script> | what?"
SECTIONS_AUDIT = ("headline", "validity", "risk", "plots", "gallery", "flips", "transfer", "oar", "samples", "errors",
                  "run")
SECTIONS_BENCH = ("tables-echo", "plots-echo", "rows-echo", "images", "run")


def invoke(*args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def audit_run(tmp_path_factory):
    """Three zoo models on six synthetic samples whose ids carry an HTML payload, plus one hostile question
    (answered wrong, so it shows in the sample table and nowhere it could be mistaken for a flip) and one
    unreadable image whose id is a script (it goes to the errors list)."""
    tmp = tmp_path_factory.mktemp("audit-report")
    data = tmp / "data"
    write_samples(synthetic_set(2, seed=10_000, families=FAMILIES), data)
    rows = [json.loads(x) for x in (data / "samples.jsonl").read_text().splitlines()]
    for i, r in enumerate(rows):
        r["id"] = f"{ID_PAYLOAD}{i}"
    rows.append(dict(rows[0], id="hostile-question", question=QUESTION_PAYLOAD))
    (data / "bad.png").write_bytes(b"not a png")
    rows.append(dict(rows[0], id="<script>document.body.dataset.pwned=3</script>", image="bad.png"))
    (data / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp / "run"
    invoke("audit", "--model", "zoo", "--data", str(data / "samples.jsonl"), "--steps", "6", "--n-boot", "200",
           "--ocr-limit", "0", "--recovery", "4", "--out", str(out))
    return out


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    pytest.importorskip("openai")
    from mmaudit.models.chat.local_server import LocalChatServer
    from mmaudit.rag.construct.benchmark import BuildConfig, build_benchmark
    from mmaudit.rag.construct.mini import mini_inputs

    tmp = tmp_path_factory.mktemp("bench-report")
    folder = tmp / "bench"
    build_benchmark(mini_inputs()[:2], folder, BuildConfig(patch_steps=4, style_steps=4))
    for f in folder.glob("*_qimg7_mm_regimes_*.jsonl"):
        rows = [json.loads(x) for x in f.read_text().splitlines()]
        first = rows[0]["qid"]
        for r in rows:
            if r["qid"] == first:
                r["question"] = QUESTION_PAYLOAD
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp / "run"
    with LocalChatServer() as srv:
        invoke("bench", "run", "--folder", str(folder), "--out", str(out), "--endpoint", srv.base_url,
               "--model", "echo", "--n-boot", "200")
    return out


def rebuilt(run: Path) -> str:
    """Delete the reports, rebuild them from the folder alone, return the page."""
    for name in ("report.html", "report.md"):
        (run / name).unlink()
    out = invoke("report", str(run))
    assert "report.html" in out and "KiB" in out
    return (run / "report.html").read_text()


def offline(page: str) -> None:
    """Nothing the page names is fetched: every src is a data URI, every link an anchor or a file of the run
    folder (relative, never leaving it: the flips' images), and the CSP forbids any other source."""
    assert re.search(r"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'", page)
    srcs = re.findall(r"\bsrc=\"([^\"]*)\"", page)
    assert srcs and all(s.startswith("data:image/") for s in srcs)
    hrefs = re.findall(r"\bhref=\"([^\"]*)\"", page)
    assert all(h.startswith("#") or re.fullmatch(r"(clean|adv)/[\w./-]+\.png", h) and ".." not in h for h in hrefs)
    assert not re.search(r"=\s*[\"']?(https?:|//)", page) and "url(" not in page  # URLs only as text


def test_audit_page_is_rebuilt_from_the_store_with_every_part(audit_run):
    page = rebuilt(audit_run)
    for ident in SECTIONS_AUDIT:
        assert f'<section id="{ident}">' in page
    for caption in ("Attack success per attack and level", "residual risk under the baselines (R0)",
                    "Rank by End-PGD ASR", "Share of reproduced End-PGD flips", "how often the model reads",
                    "overlay attention ratio on the attacked image"):
        assert caption in page, caption
    assert page.count("<figure>") >= 10
    assert "perturbation ×" in page and "edited (overlay box outlined)" in page
    assert "attention over the image" in page and "cyan: overlay region" in page  # Figure 3 heat maps
    assert "R+ − R0" in page and "Versions" in page and "wall time" in page
    assert "cannot identify image file" in page or "image" in page.split('<section id="errors">')[1]
    offline(page)
    summary = json.loads((audit_run / "summary.json").read_text())
    assert len(summary["models"]) == 3 and len(summary["errors"]) == 1


def test_hostile_ids_and_questions_are_text_in_html_and_markdown(audit_run, bench_run):
    for run in (audit_run, bench_run):
        page = rebuilt(run)
        assert "<script>document" not in page and "<img src=x" not in page
        assert "&lt;script&gt;document.body.dataset.pwned=2&lt;/script&gt;" in page
        md = (run / "report.md").read_text()
        assert "<script>" not in md and "<img src" not in md
    page = (audit_run / "report.html").read_text()
    assert "&lt;img src=x onerror=&quot;document.body.dataset.pwned=1&quot;&gt;|`0" in page
    md = (audit_run / "report.md").read_text()
    assert r"&lt;script&gt;document.body.dataset.pwned=3&lt;/script&gt;" in md  # the errors list
    for line in md.splitlines():  # a '|' from a sample never adds a cell to a Markdown table
        if line.startswith("| ") and "&lt;img" in line:
            assert r"\|" in line


def test_bench_page_is_rebuilt_from_the_run_folder(bench_run):
    page = rebuilt(bench_run)
    for ident in SECTIONS_BENCH:
        assert f'<section id="{ident}">' in page
    for caption in ("Support score under clean (TC) and polluted (TP)", "Attack family × method", "Image effect =",
                    "Share of rows per final route", "routed to the oracle", "Replies that were not the asked-for",
                    "Row browser", "SYNTHETIC FALSE STATEMENTS", "synthetic pollution:"):
        assert caption in page, caption
    assert page.count("<tr>") > 32  # 32 rows in the browser and the tables
    offline(page)
    md = (bench_run / "report.md").read_text()
    assert "Main table" in md and "Unparsed outputs per component" in md


def test_report_of_a_folder_that_is_no_run_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "not a run folder" in res.output


def browser() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it): "
                    "the in-browser check of report.html did not run")
    return exe


def chromium(page: Path, tmp: Path, *args: str, url: str | None = None) -> str:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=3000"]
    res = subprocess.run([browser(), *flags, *args, url or page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.parametrize("kind", ["audit", "bench"])
def test_pages_in_headless_chromium(kind, audit_run, bench_run, tmp_path):
    """The page as a browser builds it: every section and picture there, no payload alive (a live one would
    have marked <body> or made an element), and a screenshot of it written next to the run."""
    run = audit_run if kind == "audit" else bench_run
    browser()
    rebuilt(run)
    dom = chromium(run / "report.html", tmp_path, "--dump-dom")
    assert "data-pwned" not in dom and "<script>document" not in dom and '<img src="x"' not in dom
    for ident in SECTIONS_AUDIT if kind == "audit" else SECTIONS_BENCH:
        assert f'<section id="{ident}">' in dom
    assert len(re.findall(r'<img src="data:image/', dom)) >= (10 if kind == "audit" else 7)
    assert "document.body.dataset.pwned=2" in dom  # the hostile question is shown, as text
    if kind == "audit":  # the headline comes first; the flips browser pages and filters in the browser
        assert dom.index('<section id="headline">') < dom.index('<section id="risk">')
        assert "headline-sentences" in dom and "beyond them" in dom
        flips = dom.split('id="flips-table"')[1].split("</table>")[0]
        n = flips.count("<tr")
        assert n > 1 and re.search(r'id="flips-table-page">page 1 of \d+ \(\d+ rows\)', dom)
        model = re.search(r"<td>(zoo-L\d)</td>", flips).group(1)
        dom = chromium(run / "report.html", tmp_path, "--dump-dom",
                       url=(run / "report.html").resolve().as_uri() + f"#filter-flips-table={model}")
        flips = dom.split('id="flips-table"')[1].split("</table>")[0]
        shown = [tr for tr in flips.split("<tr")[2:] if not tr.startswith(" hidden") and 'hidden=""' not in tr[:40]]
        assert shown and all(f"<td>{model}</td>" in tr for tr in shown)  # only that model's flips remain
        assert len(shown) < n - 1  # and the others were filtered out
    shot = run / f"screenshot-{kind}.png"
    chromium(run / "report.html", tmp_path, "--window-size=1280,2400", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


def test_sweep_page_is_rebuilt_from_its_store(tmp_path):
    invoke("audit", "sweep", "--model", "zoo:L1", "--data", "synthetic:2", "--seeds", "0,1", "--steps", "2,4",
           "--eps", "4/255,8/255", "--out", str(tmp_path))
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    page = rebuilt(tmp_path)
    assert json.loads((tmp_path / "sweep.json").read_text()) == sweep  # the same numbers from the store alone
    for ident in ("table", "plots", "run"):
        assert f'<section id="{ident}">' in page
    assert "4 steps" in page and "median std across seeds" in page and page.count("<figure>") == 1
    offline(page)
