"""Black-box chat models behind one call: ``chat(messages) -> text``.

This module holds the interface and the scripted model the tests use; the
OpenAI-compatible client (:mod:`mmaudit.models.chat.endpoint`, cached and
concurrent) plugs in behind the same ``ChatModel`` protocol.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Message = dict  # {"role": "system" | "user" | "assistant", "content": str | [OpenAI content parts]}


class FailedReply(str):
    """The reply to a request that failed for good (a non-retryable error, or retries spent): an empty
    string that carries its ``reason``, so one bad request is counted for its row and the run goes on."""

    reason: str

    def __new__(cls, reason: str) -> FailedReply:
        s = super().__new__(cls, "")
        s.reason = reason
        return s


class BudgetExceeded(RuntimeError):
    """The spending cap was reached; every finished call is cached, so a rerun resumes."""


def text_content(content) -> str:
    """The text of a message's content, whether a string or a list of OpenAI content parts."""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "text")


def image_message(url: str, prompt: str, detail: str | None = None) -> list[Message]:
    """One user message: an image (a data URL) first, then the text, as a VLM endpoint is asked."""
    image_url = {"url": url} | ({"detail": detail} if detail else {})
    return [{"role": "user", "content": [{"type": "image_url", "image_url": image_url},
                                         {"type": "text", "text": prompt}]}]


def image_parts(content) -> list[str]:
    """The image URLs (data URLs) in a message's content."""
    if isinstance(content, str):
        return []
    return [p["image_url"]["url"] for p in content or [] if isinstance(p, dict) and p.get("type") == "image_url"]


def parse_json(text) -> dict | None:
    """The JSON object in a model reply: the whole reply (code fences removed), else the span from its first
    '{' to its last '}'; None when neither is a JSON object."""
    if not isinstance(text, str) or not text.strip():
        return None
    s = re.sub(r"^```(?:json)?", "", text.strip(), flags=re.IGNORECASE).strip()
    s = re.sub(r"```$", "", s).strip()
    for cand in (s, s[s.find("{"): s.rfind("}") + 1] if "{" in s else ""):
        try:
            data = json.loads(cand)
        except (json.JSONDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            return data
    return None


@runtime_checkable
class ChatModel(Protocol):
    name: str

    def chat(self, messages: Sequence[Message], **kwargs) -> str: ...


@dataclass
class ScriptedChat:
    """Replies from a list (in order, cycling) or from a function of the messages; records every call."""

    replies: list[str] | Callable[[Sequence[Message]], str]
    name: str = "scripted"
    calls: list[list[Message]] = field(default_factory=list)

    def chat(self, messages: Sequence[Message], **kwargs) -> str:
        self.calls.append(list(messages))
        if callable(self.replies):
            return self.replies(messages)
        return self.replies[(len(self.calls) - 1) % len(self.replies)]
