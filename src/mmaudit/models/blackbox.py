"""A deployed VLM behind an OpenAI-compatible endpoint, as an audit target: it answers, nothing more.

FusionAudit's rendered-text pathway needs no gradients: Typo-Evid and Nat-Evid only draw a wrong answer into the
image, RUG only asks the model to read and to answer, evidence preservation only asks again with the clue masked.
:class:`EndpointVLM` gives the audit that much of the VLM protocol (``generate``) over the chat client
(:class:`mmaudit.models.chat.endpoint.OpenAIChat`: cached in the run folder, concurrent, retried, priced and
budgeted), each image sent losslessly as a PNG data URL with the same text prompt a white-box model is given.
Pixel attacks, attention (OAR) and layer recovery need the weights: the audit marks them not applicable.

Replies that cannot be an answer are kept apart (:func:`reply_problem`): a request that failed for good (an error
status after retries, a 200 that is no chat completion) is a :class:`FailedReply` and never counts as an answer;
an empty reply or a refusal is an answer (the judge reads it) and is named as such with the sample.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from mmaudit.data.images import png_data_url
from mmaudit.errors import UsageError
from mmaudit.models.chat.base import FailedReply, image_message
from mmaudit.store import key_of

LEVEL = "API"  # a deployed model's fusion level is unknown: its own group in the level tables
REFUSAL = re.compile(r"\b(i\s*(?:am|'m)\s+(?:sorry|unable)|i\s+(?:can(?:not|'t)|won't)\s+(?:help|assist|answer|"
                     r"provide|comply|do that)|as an ai\b)", re.IGNORECASE)


def reply_problem(reply: str) -> str | None:
    """Why a black-box reply is not a plain answer (a failed request, an empty reply, a refusal), else None."""
    if isinstance(reply, FailedReply):
        return f"request failed: {reply.reason}"
    if not reply.strip():
        return "empty reply"
    if REFUSAL.search(reply):
        return f"refusal: {reply[:120]!r}"
    return None


def failed(reply: str) -> bool:
    """A request that got no reply at all (not an answer, so neither correct nor a flip)."""
    return isinstance(reply, FailedReply)


def to_uint8(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """A (3, H, W) float image in [0, 1] (what the audit hands every model) as the (H, W, 3) bytes it came from."""
    if isinstance(image, np.ndarray) and image.dtype == np.uint8:
        return image
    t = torch.as_tensor(image).detach().float().cpu()
    return (t.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def parse_endpoint(spec: str) -> tuple[str, str]:
    """'endpoint:MODEL@URL' -> (model, base URL)."""
    body = spec.removeprefix("endpoint:")
    model, _, url = body.partition("@")
    if not model or not url.startswith(("http://", "https://")):
        raise UsageError(f"--model {spec}: write endpoint:MODEL@URL, e.g. endpoint:gpt-4o@https://api.openai.com/v1 "
                         "or endpoint:Qwen/Qwen2.5-VL-7B-Instruct@http://localhost:8000/v1")
    return model, url


class EndpointVLM:
    """``generate`` over an OpenAI-compatible chat endpoint (a :class:`~mmaudit.models.vlm.Target`, not a white-box
    :class:`~mmaudit.models.vlm.VLM`); call :meth:`cache_in` with the run folder first."""

    level = LEVEL

    def __init__(self, model: str, base_url: str, concurrency: int = 8, price_per_1k=(0.0, 0.0),
                 budget: float | None = None, image_detail: str | None = None, max_tokens: int | None = None,
                 canary: bool = True) -> None:
        self.model, self.base_url, self.image_detail, self.run_canary = model, base_url, image_detail, canary
        self.unavailable: str | None = None  # why no request is sent (the endpoint takes no images)
        self.max_tokens = max_tokens  # None: the audit's answer length, as for every model
        self.name = f"endpoint-{model.replace('/', '_')}"
        # what identifies its answers: the endpoint and the model it serves (the cache keys the full requests)
        self.fingerprint = key_of(kind="endpoint", model=model, base_url=base_url, detail=image_detail)
        self._chat_args = {"concurrency": concurrency, "price_per_1k": tuple(price_per_1k), "budget": budget}
        self.chat = None

    def cache_in(self, folder: Path) -> None:
        """Keep every request and reply in ``folder/calls.jsonl``: a resumed or repeated audit pays nothing twice."""
        from mmaudit.models.chat.endpoint import OpenAIChat

        self.chat = OpenAIChat(self.model, base_url=self.base_url, cache=Path(folder) / "calls.jsonl",
                               **self._chat_args)

    def settings(self) -> dict:
        return {"endpoint": self.base_url, "served_model": self.model,
                "image_detail": self.image_detail, "max_tokens": self.max_tokens}

    def usage(self) -> dict:
        return self.chat.usage.as_dict() if self.chat is not None else {}

    def request(self, image: np.ndarray, prompt: str) -> list[dict]:
        """One user message: the image (lossless PNG) first, then the text prompt the white-box models get."""
        return image_message(png_data_url(image), prompt, self.image_detail)

    def check(self) -> dict:
        """Probe the endpoint (what it takes) and show it the image canary, once before the work: the run record's
        ``endpoint_check``. An endpoint that takes no image parts gets no request at all (every reply is a failed
        one that names why); one that misreads the canary is audited, and the headline names the cause first."""
        from mmaudit.models.chat.probe import Canary, canary, probe

        if self.chat is None:
            raise RuntimeError(f"{self.name}: call cache_in(run_folder) before the first request")
        caps = probe(self.chat, images=True)
        if not caps.reachable:
            raise UsageError(f"--model endpoint:{self.model}@{self.base_url}: the endpoint does not answer "
                             f"({caps.reasons.get('chat')})")
        seen = None
        if caps.images is False:
            self.unavailable = f"the endpoint takes no image parts ({caps.reasons['images'][:200]})"
            seen = Canary(0, "", False, self.unavailable)
        elif self.run_canary:
            seen = canary(self.generate)
        return {"kind": "endpoint_check", "key": key_of(kind="endpoint_check", model=self.fingerprint,
                                                        canary=seen.number if seen else None, caps=caps.as_dict()),
                "model": self.name, "fingerprint": self.fingerprint, "capabilities": caps.as_dict(),
                "line": caps.line(), "canary": vars(seen) if seen else None,
                "canary_line": seen.line() if seen else "image canary: skipped (--no-canary)"}

    def generate(self, images, prompts: Sequence[str], max_new_tokens: int = 16) -> list[str]:
        """Replies in order; a request that failed for good comes back as a :class:`FailedReply` with its reason."""
        requests = self._requests(images, prompts)
        if requests is None:
            return [FailedReply(f"not sent: {self.unavailable}") for _ in prompts]
        return self.chat.chat_many(requests, max_new_tokens=self.max_tokens or max_new_tokens)

    def generate_scored(self, images, prompts: Sequence[str],
                        max_new_tokens: int = 16) -> list[tuple[str, float | None]]:
        """Replies with their log-likelihood (the sum of the reply tokens' log-probabilities the endpoint
        returns; None where it returns none): what a score-based attack such as Square reads."""
        requests = self._requests(images, prompts)
        if requests is None:
            return [(FailedReply(f"not sent: {self.unavailable}"), None) for _ in prompts]
        return self.chat.chat_many_scored(requests, max_new_tokens=self.max_tokens or max_new_tokens)

    def _requests(self, images, prompts: Sequence[str]) -> list[list[dict]] | None:
        if self.chat is None:
            raise RuntimeError(f"{self.name}: call cache_in(run_folder) before the first request")
        if self.unavailable:
            return None
        ims = list(images) if isinstance(images, (list, tuple)) else list(images.unbind(0))
        return [self.request(to_uint8(im), p) for im, p in zip(ims, prompts)]
