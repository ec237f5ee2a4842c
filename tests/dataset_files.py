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


def write_mme(root: Path, n: int) -> list[tuple[str, str, str, str]]:
    """``root/existence/`` with ``n`` synthetic scenes as image + txt pairs (MME's side-by-side layout), two yes/no
    questions each: (category, image name, question, answer) per line, in file order."""
    folder = root / "existence"
    folder.mkdir(parents=True)
    rows = []
    for i in range(n):
        s = make_sample("scenes", i, seed=10_000)
        Image.fromarray(s.image).save(folder / f"{i:04d}.png")
        qa = [("Is there a shape in this image? Please answer yes or no.", "Yes"),
              ("Is this image empty? Please answer yes or no.", "No")]
        (folder / f"{i:04d}.txt").write_text("".join(f"{q}\t{a}\n" for q, a in qa))
        rows += [("existence", f"{i:04d}.png", q, a) for q, a in qa]
    return rows


def write_lmms_parquet(path: Path, columns: dict[str, list]) -> Path:
    """A parquet file as the lmms-lab datasets ship them: written by the datasets library, images as its Image
    feature (PNG bytes in a struct)."""
    import datasets

    features = datasets.Features({k: datasets.Image() if k == "image" else datasets.Value("string")
                                  for k in columns})
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(path))
    return path
