"""Layer recovery: put the clean image's hidden states back into an End-PGD flip, one decoder layer at a time.

For each flip (the first ``n_max`` per model by sample id, kept only if the
saved adversarial image still flips when reloaded), the decoder prefix hidden
states at depth l, i.e. what decoder layer l *returns* at the image positions,
are replaced by those of the clean image, and the model decodes greedily; the
flip is *recovered* if the correct answer comes back at any depth (the paper's
protocol), and the record keeps the answer at every depth.

The embedding (the input of layer 0) is never patched: layers 0..l still read
the attacked image tokens, and a model that re-injects vision features after
layer l (DeepStack) re-perturbs the patched states. A patch at the last layer
changes nothing a causal decoder's text positions read, so it never recovers.
``positions="prompt"`` patches every prompt position instead of the image tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mmaudit.data.sample import Sample
from mmaudit.judge.match import Judge
from mmaudit.models.vlm import VLM, pixels

POSITIONS = ("image", "prompt")


def unsupported(vlm: VLM) -> str | None:
    """Why ``vlm`` cannot be hooked for recovery, or None if it can."""
    for attr in ("decoder_layers", "hidden_states", "generate_patched", "image_positions"):
        try:
            if getattr(vlm, attr, None) is None:
                return f"adapter has no {attr}"
        except NotImplementedError:
            return f"adapter does not implement {attr}"
    return None


def recover(
    vlm: VLM,
    samples: Sequence[Sample],
    adversarial: Sequence[np.ndarray],
    judge: Judge,
    max_new_tokens: int,
    positions: str = "image",
) -> list[dict]:
    """Per sample: does the flip reproduce, and at which layers does clean patching restore the answer."""
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
    prompts = [s.prompt for s in samples]
    clean, adv = pixels([s.image for s in samples]), pixels(list(adversarial))

    def correct(answers: list[str]) -> list[bool]:
        return [bool(judge.correct(a, s)) for a, s in zip(answers, samples)]

    adv_answers = vlm.generate(adv, prompts, max_new_tokens)
    reproduced = [not c for c in correct(adv_answers)]
    hidden = vlm.hidden_states(clean, prompts)
    if positions == "image":
        pos = [p.cpu() for p in vlm.image_positions(clean, prompts)]
    else:
        pos = [torch.arange(hidden[0].shape[1]) for _ in samples]
    by_layer: list[list[bool]] = []
    answers_by_layer: list[list[str]] = []
    for layer in range(len(hidden)):
        values = [hidden[layer][b, pos[b].to(hidden[layer].device)] for b in range(len(samples))]
        answers = vlm.generate_patched(adv, prompts, layer, values, max_new_tokens, positions=pos)
        by_layer.append(correct(answers))
        answers_by_layer.append(answers)
    out = []
    for b, s in enumerate(samples):
        layers = [layer for layer in range(len(hidden)) if by_layer[layer][b]]
        out.append({"sample": s.id, "reproduced": reproduced[b], "adv_answer": adv_answers[b],
                    "recovered": bool(layers) and reproduced[b], "recovered_layers": layers,
                    "answers_by_layer": [answers_by_layer[layer][b] for layer in range(len(hidden))]})
    return out
