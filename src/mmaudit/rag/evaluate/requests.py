"""What each row asks: every component's prompt (and Full-MM's image), built per row as the row starts.

The staged and the pipelined run send exactly these requests, so they get the same replies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from mmaudit.data.images import inside, load_rgb
from mmaudit.errors import InputError
from mmaudit.rag.construct.records import RegimeRow
from mmaudit.rag.evaluate import prompts, routers
from mmaudit.rag.evaluate.config import BenchConfig


def many(chat, requests: list[list[dict]], budget: int | None = None, salts: list[str] | None = None,
         schema: dict | None = None) -> list[str]:
    """Batched/concurrent when the model can (cached either way), one by one otherwise; a ``schema`` goes to a
    model that decodes under one (an endpoint's response_format, the embedded model's guided decoding)."""
    if not hasattr(chat, "chat_many"):
        return [chat.chat(m) for m in requests]
    kw: dict = {"salts": salts} if salts is not None else {}
    if getattr(chat, "takes_budget", False) and budget is not None:
        kw["max_new_tokens"] = budget
    if schema is not None and getattr(chat, "takes_schema", False):
        kw["schema"] = schema
    return chat.chat_many(requests, **kw)


def user(content) -> list[dict]:
    return [{"role": "user", "content": content}]


@lru_cache(maxsize=32)
def row_image(folder: Path, path: str | None) -> tuple[np.ndarray | None, str]:
    """A row's image pixels, or None and the reason (outside the folder, a bomb, unreadable: never a crash)."""
    if not path:
        return None, "no image path"
    try:
        return load_rgb(inside(folder, path, path, "image_evidence.local_path"), path,
                        "image_evidence.local_path")[0], ""
    except InputError as e:
        return None, e.reason


def image_bridge(folder: Path) -> Callable[[str | None], str]:
    """Image -> text for a model without vision: OCR lines of the image (rapidocr), or '' without it."""
    from mmaudit.pathways.text.ocr import ocr_available, read_lines

    @cache
    def bridge(path: str | None) -> str:
        pixels = row_image(folder, path)[0] if ocr_available() else None
        return " | ".join(ln.text for ln in read_lines(pixels)) if pixels is not None else ""

    return bridge


def image_data_url(folder: Path, size: int) -> Callable[[str | None], str | None]:
    """Image -> a PNG data URL, its longest side at most ``size`` pixels; None where it cannot be loaded."""
    import numpy as np
    from PIL import Image

    from mmaudit.data.images import png_data_url

    @lru_cache(maxsize=64)  # a question's rows share images; a run's thousands of images are not all kept
    def url(path: str | None) -> str | None:
        pixels = row_image(folder, path)[0]
        if pixels is None:
            return None
        im = Image.fromarray(pixels)
        im.thumbnail((size, size), Image.Resampling.LANCZOS)
        return png_data_url(np.asarray(im))

    return url


def compact(view: dict, passages: int | None, words: int | None) -> dict:
    """Fewer and shorter passages (for a small CPU model; the full evidence otherwise)."""
    if passages is None and words is None:
        return view
    ev = [dict(p, snippet=" ".join(p["snippet"].split()[:words]) if words else p["snippet"])
          for p in view["text_evidence"][:passages]]
    return view | {"text_evidence": ev}


@dataclass(frozen=True)
class RowRequests:
    """Every request one row's components send (its prompts and Full-MM's image)."""

    parametric: list[dict]
    parametric_salt: str  # "" when Parametric is asked once per question
    text_only: list[dict]
    full_mm: list[dict]
    self_check: list[dict]
    triage: list[dict]
    text_trust_key: str  # TextTrust is asked once per (question, text evidence)
    text_trust: list[dict]


@dataclass
class Requests:
    """The rows' requests by component (the staged order sends each column as a batch)."""

    parametric: list[list[dict]]
    parametric_salts: list[str] | None
    text_only: list[list[dict]]
    full_mm: list[list[dict]]
    self_check: list[list[dict]]
    triage: list[list[dict]]
    text_trust_key: list[str]
    text_trust: dict[str, list[dict]]

    @staticmethod
    def resolver(view: dict, c: routers.Candidates, compose: bool,
                 disabled: frozenset[str] = frozenset()) -> list[dict]:
        return user(prompts.resolver_prompt(view, c.parametric, c.text_only, c.full_mm, compose, disabled))


def text_trust_key(view: dict) -> str:
    return json.dumps([view["question"], view["text_evidence"]])


def parametric_salt(row: RegimeRow, cfg: BenchConfig) -> str:
    """Per row, a salt makes each row's Parametric request a call of its own; per question, none."""
    return f"{row.dataset}:{row.row_id}" if cfg.parametric == "per-row" else ""


def request_builder(folder: Path, rows: Sequence[RegimeRow], views: list[dict],
                    cfg: BenchConfig) -> Callable[[int], RowRequests]:
    """Row i's requests, built when asked (the pipelined run builds a row as it starts, off the event loop)."""
    bridge, data_url = image_bridge(folder), image_data_url(folder, cfg.image_size)

    def full_mm(v: dict):
        """Full-MM's content: the prompt and, with vision, the image's pixels (Table 12: 'if loadable')."""
        text, path = prompts.branch_prompt(v, "FULL_MM")
        if not cfg.vision:  # a text-only model gets the image as its OCR text (said in the report)
            return text + f"\nimage text (OCR): {bridge(path) or '(none)'}"
        url = data_url(path)
        if url is None:
            return text
        image = {"url": url} | ({"detail": cfg.image_detail} if cfg.image_detail else {})
        return [{"type": "text", "text": text}, {"type": "image_url", "image_url": image}]

    def build(i: int) -> RowRequests:
        v, r = views[i], rows[i]
        return RowRequests(
            parametric=user(prompts.branch_prompt(v, "PARAMETRIC")[0]),
            parametric_salt=parametric_salt(r, cfg),
            text_only=user(prompts.branch_prompt(v, "TEXT_ONLY")[0]), full_mm=user(full_mm(v)),
            self_check=user(prompts.self_check_prompt(v)), triage=user(prompts.triage_prompt(v)),
            text_trust_key=text_trust_key(v), text_trust=user(prompts.text_trust_prompt(v)))

    return build


def build_requests(folder: Path, rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig) -> Requests:
    build = request_builder(folder, rows, views, cfg)
    each = [build(i) for i in range(len(rows))]
    return Requests(
        parametric=[x.parametric for x in each],
        parametric_salts=[x.parametric_salt for x in each] if cfg.parametric == "per-row" else None,
        text_only=[x.text_only for x in each], full_mm=[x.full_mm for x in each],
        self_check=[x.self_check for x in each], triage=[x.triage for x in each],
        text_trust_key=[x.text_trust_key for x in each],
        text_trust={x.text_trust_key: x.text_trust for x in each})


def parametric_count(rows: Sequence[RegimeRow], views: list[dict], cfg: BenchConfig) -> int:
    if cfg.parametric == "per-row":
        return len({parametric_salt(r, cfg) for r in rows})
    return len({json.dumps(v["question"]) for v in views})


def judge_request(pair: tuple, clean: dict) -> list[dict]:
    ds, qid, q, a = pair
    return user(prompts.judge_prompt(q, a, *clean.get((ds, qid), ([], None))))


def clean_evidence(row: RegimeRow, cfg: BenchConfig) -> tuple[list[dict], dict]:
    """The judge's trusted evidence (Table 12): the question's clean text and its clean image's metadata."""
    view = compact(row.model_view(), cfg.passages, cfg.words)
    im = view["image"]
    return view["text_evidence"], {"title": im["title"], "alt_text": im["alt_text"], "page_url": im["page_url"]}
