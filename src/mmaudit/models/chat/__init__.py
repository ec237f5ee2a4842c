"""Black-box chat models (the QIMG-7 stack, the judges, a VLM behind an endpoint): one protocol, four homes.

``base`` holds the protocol and what every client shares; ``endpoint`` is the cached, concurrent
OpenAI-compatible client; ``embedded`` the offline SmolLM2 shipped in a wheel, with ``guided`` decoding;
``local_server`` an OpenAI-compatible server for tests and benchmarks.
"""

from mmaudit.models.chat.base import (
    BudgetExceeded,
    ChatModel,
    FailedReply,
    Message,
    ScriptedChat,
    image_message,
    image_parts,
    parse_json,
    text_content,
)

__all__ = ["BudgetExceeded", "ChatModel", "FailedReply", "Message", "ScriptedChat", "image_message", "image_parts",
           "parse_json", "text_content"]
