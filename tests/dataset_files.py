"""Small dataset folders in the released formats, drawn from the synthetic generator, for loader and CLI tests."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from mmaudit.data.synthetic import make_sample


def write_chartqa(root: Path, n: int, extra: tuple[dict, ...] = ()) -> tuple[Path, list[dict]]:
    """``root/test/test_human.json`` with ``n`` synthetic charts in ``root/test/png`` (ChartQA's layout), then the
    ``extra`` records as given: (the file, its records)."""
    (root / "test" / "png").mkdir(parents=True)
    recs = []
    for i in range(n):
        s = make_sample("charts", i, seed=10_000)
        Image.fromarray(s.image).save(root / "test" / "png" / f"c{i}.png")
        recs.append({"imgname": f"c{i}.png", "query": s.question, "label": s.answer})
    recs += list(extra)
    path = root / "test" / "test_human.json"
    path.write_text(json.dumps(recs))
    return path, recs
