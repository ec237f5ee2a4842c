"""What an OpenAI-compatible endpoint takes, asked once before any work, and the image canary.

Servers differ: OpenAI, vLLM and SGLang take ``response_format: json_schema``; llama.cpp's server takes only
``text`` and ``json_object`` (the latter with a ``schema`` field it decodes under) and answers anything else with an
HTTP 500; some servers and proxies take no image parts, or drop them. :func:`probe` sends a handful of tiny
requests and finds out: does a plain request work, does the endpoint take image parts, which structured form does
it decode under (a ``json_object`` reply is checked against the schema, so a server that ignores the ``schema``
field is not taken for one that honours it). The run uses the strongest form it takes, else plain prompting, and
keeps the findings in its run record.

A rejection of ``response_format`` is recognised by what the server says (HTTP 400 or 422, or a 5xx whose body
names ``response_format``): it is never retried as a transient fault.

:func:`canary` shows the model an image with a random 4-digit number and asks for it: an endpoint that cannot
read it (a text-only model, a proxy that strips images) is named as the cause before any audit number is shown.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import asdict, dataclass, field

import numpy as np

FORMS = ("json_schema", "json_object+schema", "json_object")  # strongest first; none taken: plain prompting
PROBE_SCHEMA = {"name": "probe", "schema": {"type": "object", "properties": {"answer": {"type": "string",
                                                                                         "enum": ["yes"]}},
                                             "required": ["answer"], "additionalProperties": False}}
CANARY_PROMPT = "What number is in the image? Answer with the number only."
PROBE_PROMPT = 'Reply with the JSON object {"answer": "yes"}.'  # the probes' text (see probe_messages)


def response_format(form: str, schema: dict) -> dict | None:
    """The ``response_format`` a structured form sends for ``schema`` ({name, schema}); None for plain."""
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": schema | {"strict": True}}
    if form == "json_object+schema":
        return {"type": "json_object", "schema": schema["schema"]}
    if form == "json_object":
        return {"type": "json_object"}
    return None


def rejects_format(status: int | None, body: str) -> bool:
    """Whether an error says the server does not take the ``response_format`` it was sent."""
    if status in (400, 422):
        return True
    return status is not None and status >= 500 and "response_format" in body


def error_text(e) -> str:
    """The server's own words in an API error (its JSON ``message`` where it sent one)."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        msg = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if msg:
            return " ".join(str(msg).split())
    return " ".join(str(getattr(e, "message", None) or e).split())


@dataclass
class Capabilities:
    endpoint: str
    model: str
    reachable: bool = False
    images: bool | None = None  # None: not asked (no image is ever sent)
    formats: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # why a probe failed, in the server's words

    @property
    def structured(self) -> str:
        """The strongest structured form the endpoint takes, else "plain"."""
        return next((f for f in FORMS if self.formats.get(f)), "plain")

    def line(self) -> str:
        """The findings in one line."""
        if not self.reachable:
            return f"{self.model} at {self.endpoint}: not reachable ({self.reasons.get('chat', '?')})"
        parts = [] if self.images is None else [f"images {'yes' if self.images else 'no'}"]
        parts += [f"{f} {'yes' if self.formats.get(f) else 'no'}" for f in FORMS]
        use = {"plain": "plain prompting"}.get(self.structured, f"response_format {self.structured}")
        return f"{self.model} at {self.endpoint}: {', '.join(parts)} -> structured outputs via {use}"

    def as_dict(self) -> dict:
        return asdict(self) | {"structured": self.structured}


async def _ask(client, body: dict) -> tuple[int | None, str, str | None]:
    """(status, server's words or the reply text, reply text or None) of one request; never raises."""
    from openai import APIConnectionError, APIStatusError, APITimeoutError

    from mmaudit.models.chat.endpoint import completion_of, post

    try:
        resp = await post(client, body)
    except APIStatusError as e:
        return e.status_code, error_text(e), None
    except (APITimeoutError, APIConnectionError) as e:
        return None, f"{type(e).__name__}: {e}", None
    try:
        text = completion_of(resp)[0]
    except ValueError as e:
        return 200, f"malformed reply: {e}", None
    return 200, text, text


def probe(chat, images: bool = False) -> Capabilities:
    """Ask the endpoint of ``chat`` (an :class:`~mmaudit.models.chat.endpoint.OpenAIChat`) what it takes."""
    return asyncio.run(_probe(chat, images))


async def _probe(chat, images: bool) -> Capabilities:
    caps = Capabilities(endpoint=chat.base_url or "", model=chat.model)
    client = chat._client()
    base = {"model": chat.model, "messages": probe_messages(), "temperature": 0, "max_tokens": 24}
    try:
        status, said, _ = await _ask(client, base)
        caps.reachable = status == 200 and said is not None
        if not caps.reachable:
            caps.reasons["chat"] = f"HTTP {status}: {said}" if status else said
            return caps
        if images:
            status, said, _ = await _ask(client, base | {"messages": probe_messages(image=True)})
            caps.images = status == 200
            if not caps.images:
                caps.reasons["images"] = f"HTTP {status}: {said}" if status else said
        for form in FORMS:
            status, said, text = await _ask(client, base | {"response_format": response_format(form, PROBE_SCHEMA)})
            ok = status == 200 and text is not None
            if ok and form == "json_object+schema":  # a server that ignores "schema" has not decoded under it
                ok = _follows(text)
                said = said if ok else f"the reply does not follow the schema: {text[:80]!r}"
            caps.formats[form] = ok
            if not ok:
                caps.reasons[form] = f"HTTP {status}: {said}" if status not in (200, None) else said
    finally:
        await client.close()
    return caps


def probe_messages(image: bool = False) -> list[dict]:
    """The probes' one user message: the JSON question, or an image (a canary of a fixed number) to take."""
    if not image:
        return [{"role": "user", "content": PROBE_PROMPT}]
    from mmaudit.models.chat.base import image_message

    return image_message(canary_image(1234)[1], "Reply OK.")


def _follows(text: str) -> bool:
    try:
        return json.loads(text.strip()) == {"answer": "yes"}
    except ValueError:
        return False


def canary_image(number: int) -> tuple[np.ndarray, str]:
    """A white image with ``number`` written large in black: (pixels, PNG data URL)."""
    from PIL import Image, ImageDraw

    from mmaudit.data.images import png_data_url
    from mmaudit.data.render import font

    im = Image.new("RGB", (320, 160), (255, 255, 255))
    ImageDraw.Draw(im).text((160, 80), f"{number}", fill=(0, 0, 0), font=font(72), anchor="mm")
    pixels = np.asarray(im)
    return pixels, png_data_url(pixels)


def draw_number() -> int:
    """The canary's number: random, 4 digits, unknown to the endpoint before it is asked."""
    return random.SystemRandom().randint(1000, 9999)


@dataclass
class Canary:
    number: int
    reply: str
    read: bool
    reason: str  # why it counts as not read (empty when read)

    def line(self) -> str:
        if self.read:
            return f"image canary: read ({self.number})"
        return f"image canary: the endpoint did not read the canary image ({self.reason})"


def canary(generate, number: int | None = None) -> Canary:
    """Ask ``generate([image], [prompt])`` for the canary's number (a random 4-digit one unless given)."""
    from mmaudit.models.chat.base import FailedReply

    number = number if number is not None else draw_number()
    pixels, _ = canary_image(number)
    reply = generate([pixels], [CANARY_PROMPT])[0]
    if isinstance(reply, FailedReply):
        return Canary(number, "", False, f"the request failed: {reply.reason}")
    read = str(number) in re.sub(r"[\s,.]", "", reply)
    return Canary(number, reply, read, "" if read else f"it answered {reply[:60]!r} for {number}")
