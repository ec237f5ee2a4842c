"""Schema-guided decoding for a local causal LM: the reply is JSON of the schema by construction.

The decoder walks the schema's properties in order, writing the JSON text itself
(keys, quotes, commas) and asking the model only where the schema leaves a
choice: an ``enum`` value is the allowed value the model scores highest (the sum
of its tokens' log-probabilities after the text so far); a free string is
generated greedily until the model closes the quote or the token budget is
spent; an array of strings is items until the model prefers to close it. One
prompt prefill, then short incremental steps on its KV cache (cropped back after
each scored option), so a label costs a few tokens, not a generation.

Hand-written rather than a grammar library (outlines, lm-format-enforcer): the
schemas here are flat and small, and those libraries pin transformers versions
and pull heavy dependencies into the core.
"""

from __future__ import annotations

import json

import torch

MAX_ITEMS = 8


class GuidedDecoder:
    """One reply: ``GuidedDecoder(model, tok, prompt_ids).fill(schema, budget) -> JSON text``."""

    def __init__(self, model, tok, prompt_ids: list[int]):
        self.model, self.tok = model, tok
        self.cache = None
        self.logits: torch.Tensor | None = None
        self.length = 0
        self._forward(prompt_ids)

    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Append ``ids`` to the context; the log-probabilities after each of them, (len(ids), vocab)."""
        from transformers import DynamicCache

        if self.cache is None:
            self.cache = DynamicCache()
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids]), cache=self.cache, use_cache=True)
        self.cache = getattr(out, "cache", None) or out.past_key_values
        self.length += len(ids)
        logp = torch.log_softmax(out.logits[0].float(), dim=-1)
        self.logits = logp[-1]
        return logp

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def write(self, text: str) -> None:
        if text:
            self._forward(self._ids(text))

    def _crop(self, length: int, logits: torch.Tensor) -> None:
        if self.length > length:
            self.cache.crop(length - self.length)  # transformers 5: a negative count removes that many tokens
        self.length, self.logits = length, logits

    def score(self, text: str) -> float:
        """log p(text | context), the context left as it was."""
        ids = self._ids(text)
        start, first = self.length, self.logits
        total = float(first[ids[0]])
        if len(ids) > 1:
            logp = self._forward(ids[:-1])
            total += float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())
            self._crop(start, first)
        return total

    def choose(self, options: list[str]) -> int:
        """The index of the option the model scores highest; the chosen text is then written."""
        best = max(range(len(options)), key=lambda i: self.score(options[i]))
        self.write(options[best])
        return best

    def string(self, budget: int) -> tuple[str, int]:
        """A free string (the opening quote already written): greedy tokens until one holds a quote or a
        newline, or ``budget`` runs out. Returns (text, tokens used); the JSON-escaped string and its closing
        quote are then written in its place."""
        start, first = self.length, self.logits
        pieces, used = [], 0
        eos = self.tok.eos_token_id
        while used < budget:
            nxt = int(torch.argmax(self.logits))
            piece = self.tok.decode([nxt])
            if nxt == eos or '"' in piece or "\n" in piece:
                pieces.append(piece.split('"')[0].split("\n")[0] if nxt != eos else "")
                break
            pieces.append(piece)
            used += 1
            self._forward([nxt])
        text = "".join(pieces).strip()
        self._crop(start, first)
        self.write(json.dumps(text)[1:])  # the escaped content and the closing quote
        return text, used

    def fill(self, schema: dict, budget: int) -> str:
        """The JSON text of one value of ``schema`` (object, enum, string, array of strings)."""
        return self._value(schema, [budget])

    def _value(self, schema: dict, budget: list[int]) -> str:
        if "enum" in schema:
            options = [json.dumps(v) for v in schema["enum"]]
            return options[self.choose(options)]
        kind = schema.get("type")
        if kind == "object":
            parts, props = [], list(schema.get("properties", {}).items())
            self.write("{")
            for i, (key, sub) in enumerate(props):
                head = ("" if i == 0 else ", ") + json.dumps(key) + ": "
                self.write(head)
                parts.append(head + self._value(sub, budget))
            self.write("}")
            return "{" + "".join(parts) + "}"
        if kind == "string":
            self.write('"')
            text, used = self.string(max(budget[0], 0))
            budget[0] -= used
            return json.dumps(text)
        if kind == "array":
            self.write("[")
            items: list[str] = []
            while len(items) < MAX_ITEMS and budget[0] > 0:
                go = self.choose(['"' if not items else ', "', "]"])
                if go == 1:
                    return "[" + ", ".join(items) + "]"
                text, used = self.string(budget[0])
                budget[0] -= used
                items.append(json.dumps(text))
            self.write("]")
            return "[" + ", ".join(items) + "]"
        raise ValueError(f"guided decoding does not handle schema {schema!r}")
