"""Black-box chat models behind one call: ``chat(messages) -> text``.

This module holds the interface and the scripted model the tests use; the
OpenAI-compatible client (:mod:`mmaudit.models.openai_chat`, cached and
concurrent) plugs in behind the same ``ChatModel`` protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


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
