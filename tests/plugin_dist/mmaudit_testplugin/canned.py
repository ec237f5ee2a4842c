"""A chat backend from a plugin: ``tp_canned:TEXT`` answers every request with TEXT (and grades every answer as
supported), so a SATR run needs no model at all."""

from __future__ import annotations

from dataclasses import dataclass

from mmaudit.models.chat.backends import backend


@dataclass
class Canned:
    text: str

    def __post_init__(self) -> None:
        self.name = f"tp_canned:{self.text}"
        self.model = self.name
        self.calls = 0

    def chat(self, messages: list[dict]) -> str:
        self.calls += 1
        prompt = messages[-1]["content"]
        return '{"label": "supported"}' if isinstance(prompt, str) and prompt.startswith("You grade") else self.text


@backend("tp_canned", spec="tp_canned:TEXT")
def canned(args, cache, settings) -> Canned:
    return Canned(args or "yes")
