"""The zoo's shared tokenizer: whole words for prompt vocabulary, one token per glyph otherwise.

Numbers and strings are spelled glyph by glyph, so a wrong number and a right
one share a prefix and MANTIS has a first divergent token to push on.
"""

from __future__ import annotations

from mmaudit.data.render import CELL_CLASSES, CHARS, OWNERS, SHAPE_COLOURS, SHAPES

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>", "<unk>")
WORDS = tuple(
    sorted(
        set(
            "what is the value of which bar longest does text in image say there a how many are color yes no ?".split()
            + list(SHAPES)
            + [s + "s" for s in SHAPES]
            + list(SHAPE_COLOURS)
        )
    )
)


class ZooTokenizer:
    """Deterministic, dependency-free tokenizer shared by all three zoo levels."""

    def __init__(self) -> None:
        self.vocab: list[str] = list(SPECIALS) + list(CHARS) + list(WORDS)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.pad, self.bos, self.eos, self.sep, self.unk = (self.index[s] for s in SPECIALS)
        self._char_ids = {self.index[c] for c in CHARS}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Words in the vocabulary become one token; anything else is spelled (upper-cased)."""
        ids: list[int] = []
        for word in text.strip().split():
            if word in self.index and word not in CHARS:
                ids.append(self.index[word])
            elif word.lower() in WORDS:
                ids.append(self.index[word.lower()])
            else:
                ids.extend(self.index.get(ch, self.unk) for ch in word.upper())
        return ids

    def decode(self, ids: list[int]) -> str:
        out: list[str] = []
        prev_char = False
        for i in ids:
            if i == self.eos:
                break
            if i in (self.pad, self.bos, self.sep):
                continue
            tok = self.vocab[i] if 0 <= i < len(self.vocab) else "<unk>"
            is_char = i in self._char_ids
            if out and not (is_char and prev_char):
                out.append(" ")
            out.append(tok)
            prev_char = is_char
        return "".join(out)

    def class_token_map(self) -> list[list[int]]:
        """Token ids that describe each dense cell class (the glyph-tied connector uses them)."""
        rows: list[list[int]] = []
        for name in CELL_CLASSES:
            if name == "empty":
                rows.append([])
            else:
                rows.append([self.index[w] for w in name.split()])
        return rows

    def owner_token_map(self) -> list[list[int]]:
        """Token of the letter that names each owner class ("none" -> no token)."""
        return [[] if o == "none" else [self.index[o]] for o in OWNERS]
