"""A model the caller already holds (a fine-tune, a LoRA-merged model, a defended wrapper) in its family's adapter,
borrowed rather than taken over.

:func:`~mmaudit.models.hf.load_hf` owns the model it loads: the adapter puts it in eval mode and freezes its
parameters for good. A model handed in by the caller keeps its ``training`` flag and every parameter's
``requires_grad`` as the caller left them: the adapter's own switches are undone at once, and each protocol call
runs in eval mode with the parameters frozen, then puts them back, so a graph built by ``score`` reaches the
pixels and never the weights (a caller's ``backward`` leaves their ``.grad`` alone).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

from mmaudit.errors import UsageError

CALLS = ("generate", "score", "vision_features", "image_positions", "attentions", "generate_patched",
         "hidden_states")


def wrap_hf(model, processor=None, *, tokenizer=None, image_processor=None, name: str | None = None,
            level: str | None = None, chat_template: str | None = None, **extras):
    """The adapter of ``model``'s family (``model.config.model_type``) around the caller's model object.

    ``processor`` is the checkpoint's transformers processor (its tokenizer and image processor are used), or give
    ``tokenizer`` and ``image_processor`` apart; ``extras`` are the family's further constructor arguments (e.g.
    ``max_pixels``). The model is audited at its family's fusion level unless ``level`` says otherwise."""
    from mmaudit.models.hf.families import families

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    known = families()
    if model_type not in known:
        raise UsageError(f"wrap_hf: model type {model_type!r} has no adapter (supported: {sorted(known)})")
    tokenizer = tokenizer or getattr(processor, "tokenizer", None)
    image_processor = image_processor or getattr(processor, "image_processor", None)
    if tokenizer is None or image_processor is None:
        raise UsageError("wrap_hf: give the model's processor, or its tokenizer and image_processor")
    fam = known[model_type]
    template = chat_template or getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
    state = _state_of(model)
    adapter = fam.adapter(model, tokenizer, image_processor, name=name or getattr(model, "name_or_path", model_type)
                          or model_type, level=level or fam.level, chat_template=template, **extras)
    _restore(model, state)
    for call in CALLS:
        method = getattr(adapter, call, None)
        if callable(method):
            setattr(adapter, call, _borrowing(model, method))
    return adapter


def _state_of(model) -> tuple[bool, list[bool]]:
    return model.training, [p.requires_grad for p in model.parameters()]


def _restore(model, state: tuple[bool, list[bool]]) -> None:
    training, grads = state
    model.train(training)
    for p, g in zip(model.parameters(), grads):
        p.requires_grad_(g)


@contextmanager
def borrowed(model):
    """Eval mode and frozen parameters for the duration of one call; the caller's state afterwards."""
    state = _state_of(model)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        _restore(model, state)


def _borrowing(model, method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        with borrowed(model):
            return method(*args, **kwargs)

    return call
