"""The report's plots, drawn by matplotlib and returned as data URIs (SVG, or PNG for pictures), so a page
embeds them and loads nothing. Text stays text in the SVG (small files, searchable); labels are never read as
mathtext, so a '$' in a model name is just a character."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import numpy as np

Triple = tuple[float, float, float]
COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD")


def available() -> str | None:
    """None when plots can be drawn, else why not (the page says so instead of drawing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "plots need matplotlib: pip install 'mmaudit[report]'"
    return None


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "mmaudit", "text.parse_math": False,
                         "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "figure.dpi": 100, "savefig.bbox": "tight"})
    return plt


def _uri(fig, fmt: str = "svg") -> str:
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    mime = "image/svg+xml" if fmt == "svg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode()}"


def _short(label: str, n: int = 28) -> str:
    label = " ".join(str(label).split())
    return label if len(label) <= n else label[: n - 1] + "…"


def bars(groups: Sequence[str], series: dict[str, Sequence[Triple]], ylabel: str, title: str,
         scale: float = 100.0, ref: float | None = None) -> str:
    """Grouped bars with percentile-CI whiskers: one group per x label, one bar per series."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(groups) * max(1, len(series)) ** 0.5 + 1.5), 2.8))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for k, (name, vals) in enumerate(series.items()):
        p = np.array([v[0] for v in vals], float) * scale
        lo = np.array([v[1] for v in vals], float) * scale
        hi = np.array([v[2] for v in vals], float) * scale
        err = np.nan_to_num(np.vstack([p - lo, hi - p]), nan=0.0).clip(min=0)
        ax.bar(x + (k - (len(series) - 1) / 2) * width, np.nan_to_num(p), width, yerr=err, capsize=2,
               label=_short(name), color=COLOURS[k % len(COLOURS)], error_kw={"lw": 0.8})
    if ref is not None:
        ax.axhline(ref, color="#444", lw=0.8, ls="--")
    ax.set_xticks(x, [_short(g, 16) for g in groups], rotation=30 if len(groups) > 5 else 0, ha="right"
                  if len(groups) > 5 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=7, frameon=False, ncol=min(4, len(series)))
    return _uri(fig)


def dumbbell(names: Sequence[str], left: Sequence[float], right: Sequence[float], labels: tuple[str, str],
             title: str) -> str:
    """Each model's move from one value to another (R0 to R+): the gap the paper is about, on an axis from 0 to
    100 (a zoomed axis would exaggerate it) with the gap written beside each model."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.4, 0.35 * len(names) + 1.0))
    y = np.arange(len(names))[::-1]
    a, b = np.array(left, float) * 100, np.array(right, float) * 100
    ax.hlines(y, a, b, color="#999", lw=2)
    ax.scatter(a, y, color=COLOURS[0], label=labels[0], zorder=3)
    ax.scatter(b, y, color=COLOURS[3], label=labels[1], zorder=3)
    for yi, ai, bi in zip(y, a, b):
        if ai == ai and bi == bi:
            ax.text(101, yi, f"+{bi - ai:.1f}", va="center", fontsize=7, color="#444")
    ax.set_xlim(0, 100)
    ax.set_yticks(y, [_short(n) for n in names])
    ax.set_xlabel("% of the clean-correct set (right: R+ − R0, points)")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(names) < 4 else -0.15),
              ncol=2)
    return _uri(fig)


def slope(names: Sequence[str], left: Sequence[float], right: Sequence[float], labels: tuple[str, str],
          moved: Sequence[str], title: str) -> str:
    """Ranks under two measures (rank 1 = riskiest); models that moved (the caller's threshold) are drawn red."""
    plt = _plt()
    from scipy.stats import rankdata

    ra, rb = rankdata(-np.array(left, float), method="min"), rankdata(-np.array(right, float), method="min")
    fig, ax = plt.subplots(figsize=(4.2, 0.3 * len(names) + 1.2))
    for n, a, b in zip(names, ra, rb):
        c = COLOURS[3] if n in moved else "#888"
        ax.plot([0, 1], [a, b], color=c, marker="o", lw=1.5 if n in moved else 1)
        ax.text(-0.04, a, _short(n, 22), ha="right", va="center", fontsize=7, color=c)
        ax.text(1.04, b, _short(n, 22), ha="left", va="center", fontsize=7, color=c)
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(-0.6, 1.6)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.set_xticks([0, 1], list(labels))
    ax.set_ylabel("rank (1 = riskiest)")
    ax.set_title(title)
    return _uri(fig)


def lines(series: dict[str, Sequence[float]], xlabel: str, ylabel: str, title: str, relative: bool = True) -> str:
    """One line per series over its positions; ``relative`` puts every series on depth 0..1 (models differ in
    depth)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 2.8))
    for k, (name, ys) in enumerate(series.items()):
        ys = np.array(ys, float) * 100
        xs = np.linspace(0, 1, len(ys)) if relative and len(ys) > 1 else np.arange(len(ys))
        ax.plot(xs, ys, marker=".", label=_short(name), color=COLOURS[k % len(COLOURS)])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if series:
        ax.legend(fontsize=7, frameon=False)
    return _uri(fig)


def heatmap(matrix: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str, fmt: str = "{:.0f}",
            cmap: str = "viridis") -> str:
    """A labelled heat map with each cell's value written in it."""
    plt = _plt()
    m = np.array(matrix, float)
    fig, ax = plt.subplots(figsize=(0.8 * len(cols) + 3.0, 0.4 * len(rows) + 1.6))
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(cols)), [_short(c, 14) for c in cols], rotation=30, ha="right", fontsize=9)
    ax.set_yticks(range(len(rows)), [_short(r) for r in rows], fontsize=9)
    for (i, j), v in np.ndenumerate(m):
        if v == v:
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=9,
                    color="white" if v < np.nanmean(m) else "black")
    fig.colorbar(im, ax=ax, fraction=0.04).ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=11)
    return _uri(fig)


def stacked(rows: Sequence[str], shares: Sequence[dict[str, float]], title: str) -> str:
    """Horizontal 100% bars: the decision distribution per router."""
    plt = _plt()
    keys = sorted({k for s in shares for k in s})
    fig, ax = plt.subplots(figsize=(5.5, 0.3 * len(rows) + 1.2))
    left = np.zeros(len(rows))
    for k, key in enumerate(keys):
        v = np.array([s.get(key, 0.0) for s in shares]) * 100
        ax.barh(range(len(rows)), v, left=left, label=_short(key, 18), color=COLOURS[k % len(COLOURS)])
        left += v
    ax.set_yticks(range(len(rows)), [_short(r) for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("% of rows")
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, ncol=min(4, len(keys)), loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return _uri(fig)


def attention_overlay(image: np.ndarray, amap: Sequence[Sequence[float]], box: Sequence[float] | None,
                      title: str) -> str:
    """Figure 3: where the model looks, as a heat map over the image, with the overlay region outlined."""
    plt = _plt()
    from matplotlib.patches import Rectangle

    h, w = image.shape[:2]
    fig, ax = plt.subplots(figsize=(3.4, 3.4 * h / max(w, 1) + 0.4))
    ax.imshow(image)
    hm = ax.imshow(np.array(amap, float), extent=(0, w, h, 0), cmap="inferno", alpha=0.55, interpolation="nearest")
    if box:
        x0, y0, x1, y1 = box
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec="#00E5FF", lw=1.5))
    ax.set_axis_off()
    ax.set_title(_short(title, 40), fontsize=10)
    fig.colorbar(hm, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=9)
    return _uri(fig, "png")
