"""What every Hugging Face adapter shares: prompts, batching, teacher forcing, hooks, device placement.

A family module subclasses :class:`HFAdapter` and supplies what differs between
families: preprocessing from raw pixels in torch (Pillow's resampling, exactly:
:mod:`mmaudit.models.hf.resample`), the run of image tokens the family's processor
puts where the chat template shows an image, and the model inputs that carry
images. The prompt itself is the checkpoint's own chat template, rendered as its
processor renders it (a start token where the template or the tokenizer adds
one); a family's hand-written prompt is only the fallback for a tokenizer
without a template.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from mmaudit.models.vlm import AnswerScores, PatchGrid, capture_hidden, check_batch, replace_hidden

FEATURE_STAGES = ("encoder", "connector")
CHECKPOINTING = ("none", "mlp", "mlp+norms", "layers")  # what an attack's backward recomputes instead of storing


@dataclass
class Encoded:
    """A tokenised, left-padded batch plus the family's image inputs."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    image_inputs: dict
    grids: list[PatchGrid]


def setting(value, key: str):
    """A processor size field, whether the processor keeps its sizes as dicts or as SizeDicts."""
    return value.get(key) if isinstance(value, dict) else getattr(value, key, None)


def user_turn(question: str) -> list[dict]:
    """The one-turn conversation every prompt is rendered from: the image, then the text."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


def level_of(model_type: str, name: str = "") -> str:
    """The fusion level the family registry gives a transformers model type."""
    from mmaudit.models.hf.families import lookup

    entry = lookup(model_type)
    if entry is None:
        raise ValueError(f"{name or model_type}: model type {model_type!r} is not registered; pass level=")
    return entry.level


def module_device(model: nn.Module, module: nn.Module) -> torch.device:
    """Where ``module`` lives under the model's device map (accelerate hooks included)."""
    hook = getattr(module, "_hf_hook", None)
    if hook is not None and getattr(hook, "execution_device", None) is not None:
        return torch.device(hook.execution_device)
    for p in module.parameters(recurse=True):
        return p.device
    return torch.device("cpu")


class HFAdapter:
    """Base adapter: the protocol written once over a causal VLM from transformers. A family registers its model
    types with ``@family(...)`` (:mod:`mmaudit.models.hf.families`); the level comes from the model type."""

    image_placeholder = "<image>"  # what the chat template (or the fallback prompt) writes for the image
    activation_checkpointing = "none"  # under gradients: none, mlp, mlp+norms, layers (see CHECKPOINTING)

    def __init__(self, model, tokenizer, image_processor, name: str, level: str | None = None,
                 chat_template: str | None = None) -> None:
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.name = name
        self.level = level or level_of(model.config.model_type, name)
        # Inputs go where the embedding layer is, per the device map (never "the first parameter").
        self.device = module_device(model, model.get_input_embeddings())
        self.dtype = next(model.parameters()).dtype
        self.vision_device = module_device(model, self.vision_module)
        self.eos_id = self._eos_id()
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        self._fingerprint: str | None = None
        self.configure(model, tokenizer, image_processor)

    def configure(self, model, tokenizer, ip) -> None:
        """A family's own settings, read from its model config, tokenizer and image processor ``ip``."""

    @classmethod
    def load_parts(cls, path, dtype: str = "auto", device_map=None) -> tuple:
        """(model, tokenizer, image processor) of a checkpoint folder or hub id: transformers' own classes (a family
        written natively here overrides this)."""
        from transformers import AutoModelForImageTextToText, AutoTokenizer

        from mmaudit.models.hf.families import lookup

        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, device_map=device_map)
        processor = lookup(model.config.model_type).processor_class()
        return model, AutoTokenizer.from_pretrained(path), processor.from_pretrained(path)

    @classmethod
    def load_extras(cls, path, max_pixels: int | None = None) -> dict:
        """Further constructor arguments a checkpoint folder supplies (a second tokenizer, a pixel budget)."""
        return {}

    @classmethod
    def tiny_extras(cls, extra: tuple) -> dict:
        """Constructor arguments from what a tiny builder returns after (model, tokenizer, image processor)."""
        return {}

    # ------------------------------------------------------------ family hooks
    # Defaults fit the usual transformers layout (model.model.{vision_tower, language_model}); a family
    # overrides what differs.
    @property
    def vision_module(self) -> nn.Module:
        return self.model.model.vision_tower

    @property
    def decoder_layers(self) -> Sequence[nn.Module]:
        return list(self.model.model.language_model.layers)

    @property
    def resample(self):
        """The processor's resampling filter (Pillow's, reproduced exactly by ``pil_resize``)."""
        return getattr(self.image_processor, "resample", None) or "bicubic"

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """The processor's rescaled-image normalisation, in torch."""
        ip = self.image_processor
        mean = torch.tensor(ip.image_mean, dtype=x.dtype, device=x.device).view(3, 1, 1)
        std = torch.tensor(ip.image_std, dtype=x.dtype, device=x.device).view(3, 1, 1)
        return (x - mean) / std

    def pixel_batch(self, frames: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(frames).to(next(self.vision_module.parameters()).dtype)

    def preprocess(self, images: list[torch.Tensor]) -> tuple[dict, list[PatchGrid]]:
        """Raw [0, 1] images -> the family's image model inputs, in torch (differentiable)."""
        raise NotImplementedError

    def image_text(self, image_inputs: dict, index: int) -> str:
        """The run of image tokens the family's processor puts in place of ``image_placeholder``."""
        raise NotImplementedError

    def fallback_prompt(self, question: str) -> str:
        """The family's documented prompt format, for a tokenizer without a chat template."""
        raise NotImplementedError

    # ------------------------------------------------------------ prompts
    def render(self, question: str) -> str:
        """The prompt text before image tokens are expanded: the checkpoint's chat template with the generation
        prompt, else the family's fallback."""
        if self.chat_template:
            return self.tokenizer.apply_chat_template(user_turn(question), chat_template=self.chat_template,
                                                      add_generation_prompt=True, tokenize=False)
        return self.fallback_prompt(question)

    def prompt_text(self, question: str, image_inputs: dict, index: int) -> str:
        text = self.render(question)
        if self.image_placeholder not in text:
            raise ValueError(f"{self.name}: the prompt has no image placeholder {self.image_placeholder!r}: {text!r}")
        return text.replace(self.image_placeholder, self.image_text(image_inputs, index), 1)

    def prompt_ids(self, question: str, image_inputs: dict, index: int) -> list[int]:
        """Token ids of the prompt, with the start token exactly where the processor puts one: the tokenizer
        adds its special tokens unless the text already starts with the start token (transformers'
        ``apply_chat_template(tokenize=True)`` rule)."""
        text = self.prompt_text(question, image_inputs, index)
        bos = self.tokenizer.bos_token
        return list(self.tokenizer(text, add_special_tokens=not (bos and text.startswith(bos))).input_ids)

    def extra_inputs(self, input_ids: torch.Tensor) -> dict:
        return {}

    def image_features(self, image_inputs: dict) -> torch.Tensor:
        """What the connector / projector hands the language model, (B, N, D_text)."""
        raise NotImplementedError

    def encoder_features(self, image_inputs: dict) -> torch.Tensor:
        """The vision tower's own output, before any connector, (B, N, D_vision)."""
        return self.vision_module(pixel_values=image_inputs["pixel_values"]).last_hidden_state

    @property
    def image_token_id(self) -> int:
        return int(self.model.config.image_token_id)

    # ------------------------------------------------------------ shared
    def _eos_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        gen = getattr(self.model, "generation_config", None)
        if gen is not None and gen.eos_token_id is not None:
            eos = gen.eos_token_id[0] if isinstance(gen.eos_token_id, list) else gen.eos_token_id
        return int(eos)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            cfg = self.model.config.to_dict()
            h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
            h.update(str(getattr(self.model.config, "_name_or_path", "")).encode())
            if self.dtype != torch.float32:  # another precision answers differently: its records never mix
                h.update(f"dtype={self.dtype}".encode())
            n = sum(p.numel() for p in self.model.parameters())
            if n <= 50_000_000:  # small models: hash the weights themselves
                for k, v in sorted(self.model.state_dict().items()):
                    h.update(k.encode())
                    h.update(v.detach().float().cpu().numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def settings(self) -> dict:
        """What else decides this model's numbers and memory (kept in the run's model record)."""
        return {"activation_checkpointing": self.activation_checkpointing,
                "attention": self.model.config._attn_implementation}

    def checkpointed_modules(self) -> list[nn.Module]:
        """The blocks activation checkpointing wraps: each decoder and vision-tower layer, or only their MLPs, or
        their MLPs and normalisations. A norm is nearly free to recompute, yet in a bfloat16 model an RMSNorm keeps
        a float32 copy of its input, twice the bytes of the input itself (benchmarks/activation_memory.py)."""
        layers = list(self.decoder_layers)
        for module in self.vision_module.modules():
            if isinstance(module, nn.ModuleList) and len(module) > 1:
                layers += list(module)
        if self.activation_checkpointing == "layers":
            return layers
        chosen = [m.mlp for m in layers if isinstance(getattr(m, "mlp", None), nn.Module)]
        if self.activation_checkpointing == "mlp+norms":
            chosen += [c for m in layers for c in m.children() if "norm" in type(c).__name__.lower()]
        return chosen

    @contextmanager
    def checkpointing(self) -> Iterator[None]:
        """Under gradients, recompute the chosen blocks in the backward pass instead of keeping their activations
        (non-reentrant: the reentrant variant drops the input gradient the attack needs)."""
        if self.activation_checkpointing == "none" or not torch.is_grad_enabled():
            yield
            return
        if self.activation_checkpointing not in CHECKPOINTING:
            raise ValueError(f"activation_checkpointing must be one of {CHECKPOINTING}, got "
                             f"{self.activation_checkpointing!r}")
        from torch.utils.checkpoint import checkpoint

        wrapped = []
        for module in self.checkpointed_modules():
            forward = module.forward
            module.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False, **k))(forward)
            wrapped.append((module, forward))
        try:
            yield
        finally:
            for module, forward in wrapped:
                module.forward = forward

    @cached_property
    def takes_logits_to_keep(self) -> bool:
        return "logits_to_keep" in inspect.signature(self.model.forward).parameters

    def answer_tokens(self, answer: str) -> list[int]:
        return list(self.tokenizer(answer, add_special_tokens=False).input_ids) + [self.eos_id]

    def encode(self, images, prompts: list[str], answers: list[str] | None = None) -> Encoded:
        ims = [im.to(self.vision_device) for im in check_batch(images, prompts)]
        image_inputs, grids = self.preprocess(ims)
        seqs = []
        for i, q in enumerate(prompts):
            ids = self.prompt_ids(q, image_inputs, i)
            if answers is not None:
                ids += self.answer_tokens(answers[i])[:-1]  # the last token is predicted, never fed
            seqs.append(ids)
        length = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        input_ids = torch.full((len(seqs), length), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, s in enumerate(seqs):  # left padding: every prompt ends at the same index
            input_ids[i, length - len(s) :] = torch.tensor(s)
            mask[i, length - len(s) :] = 1
        return Encoded(input_ids.to(self.device), mask.to(self.device), image_inputs, grids)

    def _inputs(self, enc: Encoded) -> dict:
        return {
            "input_ids": enc.input_ids,
            "attention_mask": enc.attention_mask,
            **enc.image_inputs,
            **self.extra_inputs(enc.input_ids),
        }

    def generate(self, images, prompts: list[str], max_new_tokens: int = 16) -> list[str]:
        enc = self.encode(images, prompts)
        with torch.no_grad():
            out = self.model.generate(
                **self._inputs(enc), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=self.eos_id,
                pad_token_id=self.tokenizer.pad_token_id or self.eos_id,
            )
        new = out[:, enc.input_ids.shape[1] :]
        texts = []
        for row in new.tolist():
            if self.eos_id in row:
                row = row[: row.index(self.eos_id)]
            texts.append(self.tokenizer.decode(row, skip_special_tokens=True).strip())
        return texts

    def score(self, images, prompts: list[str], answers: list[str]) -> AnswerScores:
        enc = self.encode(images, prompts, answers)
        targets = [self.answer_tokens(a) for a in answers]
        t_max = max(len(t) for t in targets)
        # Logits only where answers are predicted (the last t_max positions): the vocabulary-wide head is never
        # evaluated over the whole prompt.
        keep = {"logits_to_keep": t_max} if self.takes_logits_to_keep else {}
        with self.checkpointing():
            logits = self.model(**self._inputs(enc), use_cache=False, **keep).logits[:, -t_max:]
        out = logits.new_zeros((len(answers), t_max, logits.shape[-1]))
        tgt = torch.zeros((len(answers), t_max), dtype=torch.long, device=logits.device)
        mask = torch.zeros((len(answers), t_max), dtype=torch.bool, device=logits.device)
        for b, t in enumerate(targets):  # answers end at the last position; logits lag by one
            n = len(t)
            out[b, :n] = logits[b, t_max - n :]
            tgt[b, :n] = torch.tensor(t, device=logits.device)
            mask[b, :n] = True
        return AnswerScores(out, tgt, mask)

    def vision_features(self, images, stage: str = "encoder") -> torch.Tensor:
        """Vis-PGD's features: the vision encoder's output (the paper's definition), or with
        ``stage="connector"`` what the connector passes on to the language model."""
        if stage not in FEATURE_STAGES:
            raise ValueError(f"stage must be one of {FEATURE_STAGES}, got {stage!r}")
        ims = [im.to(self.vision_device) for im in check_batch(images, ["-"] * len(images))]
        image_inputs, _ = self.preprocess(ims)
        return self.encoder_features(image_inputs) if stage == "encoder" else self.image_features(image_inputs)

    def image_positions(self, images, prompts: list[str]) -> list[torch.Tensor]:
        enc = self.encode(images, prompts)
        return [torch.nonzero(row == self.image_token_id).flatten() for row in enc.input_ids]

    def patch_grid(self, image: torch.Tensor) -> PatchGrid:
        _, grids = self.preprocess([image.to(self.vision_device)])
        return grids[0]

    def hidden_states(self, images, prompts: list[str]) -> list[torch.Tensor]:
        enc = self.encode(images, prompts)
        with capture_hidden(self.decoder_layers) as store, torch.no_grad():
            self.model(**self._inputs(enc), use_cache=False)
        return list(store)

    def generate_patched(self, images, prompts: list[str], layer: int, values, max_new_tokens: int = 16,
                         positions: list[torch.Tensor] | None = None) -> list[str]:
        positions = positions if positions is not None else self.image_positions(images, prompts)
        with replace_hidden(self.decoder_layers[layer], positions, values):
            return self.generate(images, prompts, max_new_tokens)

    @contextmanager
    def eager_attention(self) -> Iterator[None]:
        """Eager attention for the block (fused kernels return no weights), then whatever was set before."""
        previous = self.model.config._attn_implementation
        self.model.set_attn_implementation("eager")
        try:
            yield
        finally:
            self.model.set_attn_implementation(previous)

    def attention_layers(self) -> list[int]:
        """Decoder layers that have softmax attention (hybrid models such as Qwen3.5 mix in linear layers)."""
        text = getattr(self.model.config, "text_config", self.model.config)
        types = getattr(text, "layer_types", None) or []
        return [i for i in range(len(self.decoder_layers)) if i >= len(types) or types[i] != "linear_attention"]

    def attentions(self, images, prompts: list[str], layers: Sequence[int] | None = None) -> list[torch.Tensor]:
        usable = self.attention_layers()
        layers = list(layers) if layers is not None else usable[len(usable) // 2 :]
        if any(i not in usable for i in layers):
            raise ValueError(f"layers {layers} include some without softmax attention; these have it: {usable}")
        enc = self.encode(images, prompts)
        with self.eager_attention(), torch.no_grad():
            out = self.model(**self._inputs(enc), output_attentions=True, use_cache=False)
        index = {layer: k for k, layer in enumerate(usable)} if len(out.attentions) < len(self.decoder_layers) else \
            {layer: layer for layer in usable}  # the attentions tuple skips layers without softmax attention
        att = torch.stack([out.attentions[index[i]].float().to(self.device) for i in layers]).mean(0).mean(1)
        result = []
        for b in range(len(prompts)):
            img = torch.nonzero(enc.input_ids[b] == self.image_token_id).flatten()
            after = torch.arange(int(img.max()) + 1, enc.input_ids.shape[1], device=self.device)
            result.append(att[b][after][:, img])
        return result
