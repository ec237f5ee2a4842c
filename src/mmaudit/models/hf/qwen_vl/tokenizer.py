"""Qwen-VL's tokenizer (tiktoken over the release's ``qwen.tiktoken``) and its chat format.

The vocabulary file holds one ``base64(token) rank`` pair per line; the special tokens follow its ranks in the
release's order: ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, 205 ``<|extra_N|>``, then ``<ref>``,
``</ref>``, ``<box>``, ``</box>``, ``<quad>``, ``</quad>``, ``<img>``, ``</img>``, ``<imgpad>``. Text is NFC-normalised
and split by the release's pattern before byte-pair merging.

The prompt is the release's ``make_context`` (ChatML) with its default system message, the question written as
its ``from_list_format`` writes an image and a text: ``Picture 1: <img>...</img>\\n`` then the question. Between
``<img>`` and ``</img>`` the release puts the image's file path as byte ids padded with ``<imgpad>`` to 256; its
model overwrites all 256 positions with the image's features, so here they are 256 ``<imgpad>`` ids (the pixels
travel beside the ids). Every id outside that span is the release's.
"""

from __future__ import annotations

import base64
import unicodedata
from dataclasses import dataclass
from pathlib import Path

PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
           r"""\s+(?!\S)|\s+""")
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
IMAGE_TAGS = ("<ref>", "</ref>", "<box>", "</box>", "<quad>", "</quad>", "<img>", "</img>", "<imgpad>")
SPECIALS = (ENDOFTEXT, IM_START, IM_END, *(f"<|extra_{i}|>" for i in range(205)), *IMAGE_TAGS)
IMAGE_SPAN = 256
SYSTEM = "You are a helpful assistant."
VOCAB_FILE = "qwen.tiktoken"


@dataclass
class Encoding:
    input_ids: list[int]


def read_ranks(path: str | Path) -> dict[bytes, int]:
    """``qwen.tiktoken``: token bytes -> rank."""
    out = {}
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            out[base64.b64decode(token)] = int(rank)
    return out


def write_ranks(path: str | Path, ranks: dict[bytes, int]) -> None:
    Path(path).write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))


class QWenTokenizer:
    """What the adapter asks of a tokenizer (encode, decode, the special ids), over tiktoken."""

    chat_template = None
    bos_token = None

    def __init__(self, vocab_file: str | Path) -> None:
        import tiktoken

        ranks = read_ranks(vocab_file)
        self.special = {t: i for i, t in enumerate(SPECIALS, start=len(ranks))}
        self.encoding = tiktoken.Encoding("Qwen", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens=self.special)
        self.eod_id, self.im_start_id, self.im_end_id = (self.special[t] for t in (ENDOFTEXT, IM_START, IM_END))
        self.img_start_id, self.img_end_id, self.img_pad_id = (self.special[t] for t in IMAGE_TAGS[-3:])
        self.pad_token_id = self.eos_token_id = self.eod_id

    @classmethod
    def from_pretrained(cls, path: str | Path) -> QWenTokenizer:
        return cls(Path(path) / VOCAB_FILE)

    def __len__(self) -> int:
        return self.encoding.n_vocab

    def encode(self, text: str, image_tags: bool = False) -> list[int]:
        """Ids of ``text`` (NFC); special-token spellings are plain text unless ``image_tags`` lets the image tags
        through (the release's ``allowed_special``)."""
        allowed = set(IMAGE_TAGS) if image_tags else set()
        return self.encoding.encode(unicodedata.normalize("NFC", text), allowed_special=allowed, disallowed_special=())

    def __call__(self, text: str, add_special_tokens: bool = False) -> Encoding:
        return Encoding(self.encode(text))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i < self.eod_id]
        return self.encoding.decode(ids, errors="replace")

    def convert_ids_to_tokens(self, i: int) -> str:
        return next((t for t, k in self.special.items() if k == i), self.decode([i]))

    def chat_ids(self, question: str, system: str = SYSTEM) -> list[int]:
        """The release's one-turn ChatML prompt for an image and ``question``, the assistant's turn opened."""
        nl = self.encode("\n")

        def turn(role: str, content: list[int]) -> list[int]:
            return [self.im_start_id, *self.encode(role), *nl, *content, self.im_end_id]

        user = [*self.encode("Picture 1: "), self.img_start_id, *[self.img_pad_id] * IMAGE_SPAN, self.img_end_id,
                *self.encode("\n" + question)]
        return [*turn("system", self.encode(system)), *nl, *turn("user", user), *nl, self.im_start_id,
                *self.encode("assistant"), *nl]
