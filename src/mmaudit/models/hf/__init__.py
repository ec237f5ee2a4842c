"""Hugging Face adapters (extra ``[hf]``): one module per family, each registering the model types it serves
(:mod:`mmaudit.models.hf.families`)."""

from __future__ import annotations

from pathlib import Path

from mmaudit.errors import UsageError


def chat_template_of(path: str | Path, tokenizer) -> str | None:
    """The checkpoint's chat template: its processor's (``chat_template.jinja`` or ``chat_template.json``) first,
    as transformers' processors and vLLM prefer it, else the tokenizer's."""
    import json

    from transformers.utils import cached_file

    for name in ("chat_template.jinja", "chat_template.json"):
        found = cached_file(path, name, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
        if found:
            text = Path(found).read_text()
            return json.loads(text).get("chat_template") if name.endswith(".json") else text
    return getattr(tokenizer, "chat_template", None)


def load_hf(path: str | Path, level: str | None = None, dtype: str = "auto", device_map: str | dict | None = None,
            max_pixels: int | None = None):
    """Load a local or hub checkpoint (or one of the paper's 18 by short name) in the adapter its model type is
    registered with, at that type's fusion level unless ``level`` says otherwise, with the checkpoint's own chat
    template; ``max_pixels`` lowers a Qwen-family processor's pixel budget per image."""
    from mmaudit.models.hf.families import families
    from mmaudit.models.hf.registry import check_supported

    entry = check_supported(str(path))
    if entry is not None:
        path, level = entry.hub_id, level or entry.level
    model_type = model_type_of(path)
    known = families()
    if model_type not in known:
        raise UsageError(f"--model {path}: model type {model_type!r} has no adapter (supported: {sorted(known)})")
    fam = known[model_type]
    model, tokenizer, processor = fam.adapter.load_parts(path, dtype, device_map)
    return fam.adapter(model, tokenizer, processor, name=str(path), level=level or fam.level,
                       chat_template=chat_template_of(path, tokenizer), **fam.adapter.load_extras(path, max_pixels))


def model_type_of(path: str | Path) -> str:
    """The checkpoint's ``config.json`` model type, read as a file: a release whose modelling code is remote (its
    ``auto_map``) names its type all the same, and no remote code runs to learn it."""
    import json

    from transformers.utils import cached_file

    try:
        found = cached_file(str(path), "config.json")
        config = json.loads(Path(found).read_text())
        if "model_type" not in config:  # an older config: transformers knows its type from its architecture
            from transformers import AutoConfig

            return AutoConfig.from_pretrained(path).model_type
        return config["model_type"]
    except (OSError, ValueError) as e:  # offline, unknown id, a folder without a config
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--model {path}: not a local checkpoint folder, and it could not be loaded from the "
                         f"Hugging Face hub ({reason}); check the id, or download the checkpoint and pass its "
                         "folder (offline? set HF_HUB_OFFLINE=1 to skip the hub)") from None
