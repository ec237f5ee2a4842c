"""A self-contained HTML page: every string escaped, pictures embedded as data URIs, nothing loaded.

The Content-Security-Policy allows images from data URIs, inline styles and the one script below (by its
hash) and nothing else: no network request, and no script or handler smuggled in through a sample id or a
model's output could run even if it escaped escaping. Without the script the page reads the same; it only
adds sorting by a column and the row filter."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from mmaudit.data.images import inside, load_rgb
from mmaudit.errors import InputError

SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table'), body = table.tBodies[0], i = th.cellIndex;
    var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
    var key = function (tr) { var t = tr.cells[i] ? tr.cells[i].textContent.trim() : ''; var n = parseFloat(t);
      return isNaN(n) ? t.toLowerCase() : n; };
    Array.from(body.rows).sort(function (a, b) { var x = key(a), y = key(b);
      return (x > y ? 1 : x < y ? -1 : 0) * dir; }).forEach(function (tr) { body.appendChild(tr); });
  });
});
function paginate(t) {
  var size = parseInt(t.dataset.page || '0', 10); if (!size) { return; }
  var rows = Array.from(t.tBodies[0].rows).filter(function (tr) { return !tr.dataset.filtered; });
  var pages = Math.max(1, Math.ceil(rows.length / size)), p = Math.min(parseInt(t.dataset.at || '0', 10), pages - 1);
  t.dataset.at = p;
  Array.from(t.tBodies[0].rows).forEach(function (tr) { tr.hidden = true; });
  rows.slice(p * size, (p + 1) * size).forEach(function (tr) { tr.hidden = false; });
  var info = document.getElementById(t.id + '-page'); if (info) { info.textContent = 'page ' + (p + 1) + ' of ' +
    pages + ' (' + rows.length + ' rows)'; }
}
document.querySelectorAll('input.filter').forEach(function (inp) {
  inp.addEventListener('input', function () {
    var q = inp.value.toLowerCase(), t = document.getElementById(inp.dataset.target);
    Array.from(t.tBodies[0].rows).forEach(function (tr) {
      var out = q && tr.textContent.toLowerCase().indexOf(q) < 0;
      if (out) { tr.dataset.filtered = '1'; } else { delete tr.dataset.filtered; }
      tr.hidden = out; });
    t.dataset.at = 0; paginate(t);
  });
});
document.querySelectorAll('button.pager').forEach(function (b) {
  b.addEventListener('click', function () {
    var t = document.getElementById(b.dataset.target);
    t.dataset.at = Math.max(0, parseInt(t.dataset.at || '0', 10) + parseInt(b.dataset.step, 10)); paginate(t);
  });
});
document.querySelectorAll('table[data-page]').forEach(paginate);
var wanted = location.hash.match(/^#filter-([A-Za-z0-9_-]+)=(.*)$/);
if (wanted) {
  var box = document.querySelector('input.filter[data-target="' + wanted[1] + '"]');
  if (box) { box.value = decodeURIComponent(wanted[2]); box.dispatchEvent(new Event('input')); }
}
"""

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#23395d;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;opacity:.85}nav{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;
padding:6px 24px;z-index:2}nav a{margin-right:14px;color:#23395d;text-decoration:none;font-size:13px}
main{padding:8px 24px 40px;max-width:1400px}section{margin:18px 0 28px}h2{font-size:17px;border-bottom:2px solid
#23395d;padding-bottom:3px}h3{font-size:14px;margin:14px 0 6px}table{border-collapse:collapse;margin:6px 0 12px;
font-size:12.5px;background:#fff}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eef1f6;cursor:pointer;white-space:nowrap}tr.macro td{background:#f3f6fa;font-weight:600}
.figs{display:flex;flex-wrap:wrap;gap:14px}figure{margin:0;background:#fff;border:1px solid #ddd;padding:6px}
figure img{display:block;max-width:100%}figcaption{font-size:12px;color:#555;max-width:560px}
.gallery{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #ddd;padding:8px;
max-width:720px}.card .imgs{display:flex;gap:6px;flex-wrap:wrap}.card .imgs figure{border:none;padding:0}
.card img{width:180px;image-rendering:pixelated}.card dl{display:grid;grid-template-columns:max-content 1fr;
gap:1px 8px;margin:6px 0 0;font-size:12.5px}.card dt{color:#666}.card dd{margin:0;word-break:break-word}
.note{color:#555;font-size:12.5px}.warn{background:#fff4e0;border-left:4px solid #e0a030;padding:6px 10px}
.synthetic{background:#fdecea;border-left:4px solid #c0392b;padding:4px 8px;margin:3px 0}
.synthetic b{color:#c0392b}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
input.filter{padding:4px 8px;width:320px;margin:4px 0}td.ans{max-width:280px}
"""


def esc(x) -> str:
    """Text as HTML text: every <, >, &, quote escaped; None reads as an empty string."""
    return "" if x is None else html.escape(str(x), quote=True)


class Raw(str):
    """A table cell that is already HTML, built from escaped parts (``esc``, ``link``); never from raw input."""


def link(rel: str | None, text: str) -> Raw:
    """A link to a file of the run folder (relative, so it works where the folder is opened)."""
    return Raw(f"<a href=\"{esc(rel)}\">{esc(text)}</a>") if rel else Raw("")


def table(head: Sequence[str], rows: Sequence[Sequence], ident: str = "", macro: Sequence[bool] = (),
          page: int = 0) -> str:
    """A sortable table; cells are escaped here (pass plain strings, or :class:`Raw` HTML); ``page``: rows per
    page, with pager buttons (needs ``ident``)."""
    body = "".join(("<tr class=\"macro\">" if i < len(macro) and macro[i] else "<tr>")
                   + "".join(f"<td>{c if isinstance(c, Raw) else esc(c)}</td>" for c in r) + "</tr>"
                   for i, r in enumerate(rows))
    attrs = (f' id="{esc(ident)}"' if ident else "") + (f' data-page="{page}"' if page else "")
    pager = (f'<div class="pager"><button class="pager" data-target="{esc(ident)}" data-step="-1">previous</button> '
             f'<span id="{esc(ident)}-page"></span> <button class="pager" data-target="{esc(ident)}" '
             'data-step="1">next</button></div>') if page and ident else ""
    return (f"<table class=\"sortable\"{attrs}><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>" + pager)


def figure(uri: str, caption: str) -> str:
    return f"<figure><img src=\"{esc(uri)}\" alt=\"{esc(caption)}\"><figcaption>{esc(caption)}</figcaption></figure>"


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def png_uri(image: np.ndarray | Image.Image, max_side: int = 256) -> str:
    """A picture as an embedded PNG, shrunk to ``max_side`` (nearest neighbour: pixels stay pixels)."""
    im = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image, np.uint8))
    if max(im.size) > max_side:
        s = max_side / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.NEAREST)
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    return data_uri(buf.getvalue(), "image/png")


def read_rgb(folder: Path, rel: str | None) -> np.ndarray | None:
    """An image by its path relative to ``folder`` (the run's, or the benchmark's), through the project's one
    loader (paths out of the folder and decompression bombs refused); None when it cannot be shown."""
    if not rel:
        return None
    try:
        return load_rgb(inside(folder, rel, rel), rel)[0]
    except InputError:
        return None


def runs_html(runs: list[dict], skip: tuple[str, ...] = ()) -> str:
    """A run's invocations (with wall time), the latest one's parameters (less ``skip``) and versions."""
    if not runs:
        return "<p class=\"note\">No run record (a run made before run records were kept).</p>"
    last = runs[-1]
    return (table(["invocation", "command", "wall time (s)"],
                  [[r["id"], r["command"], "killed or running" if r["seconds"] is None else f"{r['seconds']:.1f}"]
                   for r in runs])
            + "<h3>Parameters (latest invocation)</h3>"
            + table(["parameter", "value"], [[k, json.dumps(v)] for k, v in last["params"].items() if k not in skip])
            + "<h3>Versions</h3>" + table(["package", "version"], list(last["versions"].items())))


class Page:
    """Sections in order, a sticky table of contents, one file."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title, self.subtitle = title, subtitle
        self.sections: list[tuple[str, str, str]] = []

    def add(self, ident: str, title: str, body: str) -> None:
        self.sections.append((ident, title, body))

    def render(self) -> str:
        digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
        csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
        nav = "".join(f"<a href=\"#{esc(i)}\">{esc(t)}</a>" for i, t, _ in self.sections)
        body = "".join(f"<section id=\"{esc(i)}\"><h2>{esc(t)}</h2>{b}</section>" for i, t, b in self.sections)
        return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
                f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>{esc(self.title)}</title><style>{STYLE}</style></head><body>"
                f"<header><h1>{esc(self.title)}</h1><p>{esc(self.subtitle)}</p></header><nav>{nav}</nav>"
                f"<main>{body}</main><script>{SCRIPT}</script></body></html>")
