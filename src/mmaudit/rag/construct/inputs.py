"""What `mmaudit bench build` takes: questions with clean evidence, from JSONL or the bundled mini set.

A JSONL line: ``{"qid", "dataset", "question", "subject", "passages": [{"title",
"snippet", "url"}], "polluted_passages"?: [...], "images": [{"path" | "image_url",
"alt_text", "title", "page_url"}], "false_caption"?, "false_claim"?, "false_target"?}``.
Image paths are relative to the JSONL file. A line that cannot be parsed is an
:class:`InputError` naming the file, line and field; it is recorded as a drop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmaudit.data.images import inside, load_rgb
from mmaudit.errors import InputError, json_reason
from mmaudit.rag.construct.records import TextEvidence


@dataclass
class ImageInput:
    alt_text: str = ""
    title: str = ""
    page_url: str = ""
    image_url: str = ""
    path: str = ""  # a local file, relative to ``root`` when that is set; loaded on demand
    pixels: np.ndarray | None = None
    root: str = ""  # the dataset folder the path may not leave
    notes: list[str] = field(default_factory=list)  # how the file was converted when loaded (load_rgb)

    def load(self, qid: str) -> np.ndarray:
        if self.pixels is not None:
            return self.pixels
        if not self.path:
            raise InputError(qid, "images.path", "no local image file")
        path = inside(Path(self.root), self.path, qid, "images.path") if self.root else Path(self.path)
        pixels, notes = load_rgb(path, qid, "images.path")
        self.notes = notes
        return pixels


@dataclass
class QuestionInput:
    qid: str
    dataset: str
    question: str
    subject: str
    passages: list[TextEvidence]
    images: list[ImageInput]
    topic: str = ""
    polluted_passages: list[TextEvidence] | None = None
    false_caption: str = ""
    false_claim: str = ""
    false_target: str = ""
    extra: dict = field(default_factory=dict)


def read_questions(path: Path) -> list[QuestionInput | InputError]:
    out: list[QuestionInput | InputError] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{Path(path).name}:{n}"
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise InputError(where, "line", f"expected a JSON object, got {type(d).__name__}")
            for key in ("question", "subject", "topic", "dataset"):
                if key in d and not isinstance(d[key], str):
                    raise InputError(where, key, f"expected a string, got {type(d[key]).__name__}")
            if not isinstance(d.get("images", []), list) or not all(isinstance(i, dict) for i in d.get("images", [])):
                raise InputError(where, "images", "expected a list of objects")
            images = [ImageInput(alt_text=i.get("alt_text", ""), title=i.get("title", ""),
                                 page_url=i.get("page_url", ""), image_url=i.get("image_url", ""),
                                 path=i.get("path") or "", root=str(Path(path).parent) if i.get("path") else "")
                      for i in d.get("images", [])]
            polluted = d.get("polluted_passages")
            out.append(QuestionInput(
                qid=str(d["qid"]), dataset=d.get("dataset", "CUSTOM"), question=d["question"],
                subject=d.get("subject") or d["question"], topic=d.get("topic", ""),
                passages=[TextEvidence(**p) for p in d.get("passages", [])], images=images,
                polluted_passages=[TextEvidence(**p) for p in polluted] if polluted else None,
                false_caption=d.get("false_caption", ""), false_claim=d.get("false_claim", ""),
                false_target=d.get("false_target", "")))
        except json.JSONDecodeError as e:
            out.append(InputError(where, "line", json_reason(e)))
        except InputError as e:
            out.append(e)
        except KeyError as e:
            out.append(InputError(where, str(e.args[0]), "is missing"))
        except (TypeError, ValueError) as e:
            out.append(InputError(where, "passages", str(e).splitlines()[0]))
    return out


def read_csv_pools(passages: Path, images: Path, dataset: str = "CUSTOM") -> list[QuestionInput | InputError]:
    """Questions from two CSV pools keyed by ``question_idx``.

    ``passages``: question_idx, question, title, snippet, url (one row per passage).
    ``images``: the release's query_image_evidence columns (question_idx, question,
    image_url, image_alt, source_title, source_url, ...) plus ``image_path``, a
    local file relative to the CSV (the release's URLs are not fetched).
    """
    from mmaudit.rag.construct.records import read_table

    _, prow = read_table(passages)
    _, irow = read_table(images)
    out: list[QuestionInput | InputError] = []
    by_q: dict[str, QuestionInput] = {}
    for n, r in enumerate(prow, 2):
        qid = r.get("question_idx", "")
        if not qid or not r.get("question") or not r.get("snippet"):
            out.append(InputError(f"{Path(passages).name}:{n}", "question_idx/question/snippet", "is missing"))
            continue
        q = by_q.setdefault(qid, QuestionInput(qid=qid, dataset=dataset, question=r["question"],
                                               subject=r.get("subject") or r["question"], passages=[], images=[]))
        q.passages.append(TextEvidence(title=r.get("title", ""), snippet=r["snippet"], url=r.get("url", "")))
    for n, r in enumerate(irow, 2):
        q = by_q.get(r.get("question_idx", ""))
        if q is None:
            out.append(InputError(f"{Path(images).name}:{n}", "question_idx", "has no passages"))
            continue
        path = r.get("image_path", "")
        q.images.append(ImageInput(alt_text=r.get("image_alt", ""), title=r.get("source_title", ""),
                                   page_url=r.get("source_url", ""), image_url=r.get("image_url", ""),
                                   path=path, root=str(Path(images).parent) if path else ""))
    return out + list(by_q.values())
