"""Schema-guided decoding for a local causal LM: every reply is JSON of the schema by construction.

The decoder walks the schema's properties in order, writing the JSON text itself
(keys, quotes, commas) and letting the model decide only where the schema leaves
a choice: an ``enum`` value is decoded token by token among the allowed values
(the most likely next token that keeps some value possible; once one value is
left its remaining tokens are written without asking), a free string greedily
until the model closes the quote, ends the line or the token budget runs out,
an array of strings item by item until the model prefers to close it.

A batch of replies to one schema is decoded in lockstep: on a CPU a one-token
step costs the weights' memory traffic whatever the batch, so replies share
every step. The prompts' common prefix (chat template and instructions) is
computed once; each prompt's own suffix, and every later step, is fed as one
right-padded batch whose pads are masked out, with each row's positions counted
from its own tokens. Fixed text is fed lazily, with whatever follows it.

Hand-written rather than a grammar library (outlines, lm-format-enforcer): the
schemas here are small and flat, and those libraries pin transformers versions
and pull heavy dependencies into the core.
"""

from __future__ import annotations

import json
import os

import torch

MAX_ITEMS = 8


def common_prefix(seqs: list[list[int]]) -> int:
    return len(os.path.commonprefix(seqs)) if seqs else 0


class BatchDecoder:
    """``BatchDecoder(model, tok, prompt_ids).fill(schema, budget) -> one JSON text per prompt``."""

    def __init__(self, model, tok, prompts: list[list[int]]):
        from transformers import DynamicCache

        self.model, self.tok, self.n = model, tok, len(prompts)
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        self.eos = tok.eos_token_id
        k = min(common_prefix(prompts), min(len(p) for p in prompts) - 1)  # every row keeps a token of its own
        self.cache = DynamicCache()
        self.mask = torch.ones(self.n, 0, dtype=torch.long)
        self.pos = torch.zeros(self.n, dtype=torch.long)
        self.logits = torch.zeros(self.n, 1)
        self.pending: list[list[int]] = [[] for _ in range(self.n)]
        if k > 0:  # the shared prefix once, then its cache repeated for every row
            with torch.no_grad():
                out = model(input_ids=torch.tensor([prompts[0][:k]]), cache=self.cache, use_cache=True,
                            logits_to_keep=1)
            self.cache = getattr(out, "cache", None) or out.past_key_values
            if self.n > 1:
                self.cache.batch_repeat_interleave(self.n)
            self.mask = torch.ones(self.n, k, dtype=torch.long)
            self.pos += k
        self.pending = [list(p[k:]) for p in prompts]
        self._flush()

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def write(self, text: str, rows=None) -> None:
        ids = self._ids(text)
        for i in range(self.n) if rows is None else rows:
            self.pending[i] += ids

    def _flush(self) -> None:
        """Feed every row's pending tokens in one forward; each row's log-probabilities then follow its text."""
        lens = [len(p) for p in self.pending]
        width = max(lens)
        if width == 0:
            return
        ids = torch.tensor([p + [self.pad] * (width - len(p)) for p in self.pending])
        new = torch.tensor([[1] * n + [0] * (width - n) for n in lens])
        mask = torch.cat([self.mask, new], dim=1)
        positions = self.pos[:, None] + torch.arange(width)[None, :]
        last = sorted({n - 1 for n in lens if n})
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=self.cache,
                             use_cache=True, logits_to_keep=torch.tensor(last))
        self.cache = getattr(out, "cache", None) or out.past_key_values
        logp = torch.log_softmax(out.logits.float(), dim=-1)
        if self.logits.shape[-1] != logp.shape[-1]:
            self.logits = torch.zeros(self.n, logp.shape[-1])
        for i, n in enumerate(lens):
            if n:
                self.logits[i] = logp[i, last.index(n - 1)]
        self.mask, self.pos = mask, self.pos + torch.tensor(lens)
        self.pending = [[] for _ in range(self.n)]

    def choose(self, options: list[str], rows: list[int]) -> dict[int, int]:
        """Decode one of ``options`` in each of ``rows``, token by token; row -> index of the value written."""
        toks = [self._ids(o) for o in options]
        alive = {i: list(range(len(options))) for i in rows}
        depth = 0
        while any(len(a) > 1 for a in alive.values()):
            self._flush()
            for i, a in alive.items():
                if len(a) == 1:
                    continue
                done = [o for o in a if len(toks[o]) == depth]
                if done:
                    alive[i] = done[:1]
                    continue
                best = max({toks[o][depth] for o in a}, key=lambda t: float(self.logits[i, t]))
                self.pending[i].append(best)
                alive[i] = [o for o in a if toks[o][depth] == best]
            depth += 1
        chosen = {}
        for i, (o,) in alive.items():
            written = min(depth, len(toks[o]))
            self.pending[i] += toks[o][written:]
            chosen[i] = o
        return chosen

    def strings(self, rows: list[int], budget: dict[int, int]) -> dict[int, str]:
        """A free string in each row (its opening quote written): greedy tokens until one holds a quote or a
        newline, or the row's budget runs out; then the closing quote. Spends ``budget``."""
        pieces: dict[int, list[str]] = {i: [] for i in rows}
        active = [i for i in rows if budget[i] > 0]
        while active:
            self._flush()
            still = []
            for i in active:
                nxt = int(torch.argmax(self.logits[i]))
                piece = self.tok.decode([nxt])
                if nxt == self.eos or '"' in piece or "\n" in piece:
                    if nxt != self.eos:
                        pieces[i].append(piece.split('"')[0].split("\n")[0])
                    continue
                pieces[i].append(piece)
                budget[i] -= 1
                self.pending[i].append(nxt)
                if budget[i] > 0:
                    still.append(i)
            active = still
        self.write('"', rows)
        return {i: "".join(p).replace("\\", "").strip() for i, p in pieces.items()}

    def fill(self, schema: dict, budget: int) -> list[str]:
        """The JSON text of one value of ``schema`` (object, enum, string, array of strings) per row."""
        left = {i: budget for i in range(self.n)}
        out = self._value(schema, list(range(self.n)), left)
        return [out[i] for i in range(self.n)]

    def _value(self, schema: dict, rows: list[int], budget: dict[int, int]) -> dict[int, str]:
        if "enum" in schema:
            values = [json.dumps(v) for v in schema["enum"]]
            if all(isinstance(v, str) for v in schema["enum"]):  # the quote first: the values then differ at once
                self.write('"', rows)
                return {i: values[o] for i, o in self.choose([v[1:] for v in values], rows).items()}
            return {i: values[o] for i, o in self.choose(values, rows).items()}
        kind = schema.get("type")
        if kind == "object":
            parts = {i: "{" for i in rows}
            self.write("{", rows)
            for n, (key, sub) in enumerate(schema.get("properties", {}).items()):
                head = ("" if n == 0 else ", ") + json.dumps(key) + ": "
                self.write(head, rows)
                for i, v in self._value(sub, rows, budget).items():
                    parts[i] += head + v
            self.write("}", rows)
            return {i: p + "}" for i, p in parts.items()}
        if kind == "string":
            self.write('"', rows)
            return {i: json.dumps(t) for i, t in self.strings(rows, budget).items()}
        if kind == "array":
            self.write("[", rows)
            items: dict[int, list[str]] = {i: [] for i in rows}
            closed: set[int] = set()  # rows that chose "]" (already written)
            open_rows = [i for i in rows if budget[i] > 0]
            while open_rows:
                first = [i for i in open_rows if not items[i]]
                more = [i for i in open_rows if items[i]]
                go = (self.choose(['"', "]"], first) if first else {}) | (self.choose([', "', "]"], more) if more
                                                                             else {})
                closed |= {i for i in open_rows if go[i] == 1}
                adding = [i for i in open_rows if go[i] == 0]
                for i, t in self.strings(adding, budget).items():
                    items[i].append(json.dumps(t))
                open_rows = [i for i in adding if budget[i] > 0 and len(items[i]) < MAX_ITEMS]
            self.write("]", [i for i in rows if i not in closed])
            return {i: "[" + ", ".join(items[i]) + "]" for i in rows}
        raise ValueError(f"guided decoding does not handle schema {schema!r}")
