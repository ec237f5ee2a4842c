"""MANTIS: the margin at the first token where the correct and the wrong answer diverge.

Both continuations are fixed before optimising (the wrong one from the shared
generator); the loss is log p(wrong token) - log p(correct token) at that one
position, teacher-forced on the shared prefix. End-PGD spreads its gradient
over every answer token; MANTIS spends it where the answer is decided.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmaudit.pathways.pixel.base import PixelAttack
from mmaudit.pathways.registry import attack
from mmaudit.pathways.wrong import first_divergence, wrong_answer


def divergence_margin(logits: torch.Tensor, position: torch.Tensor, wrong: torch.Tensor, correct: torch.Tensor):
    """Per sample, log p(wrong) - log p(correct) at ``position`` (logits: B x T x V)."""
    b = torch.arange(logits.shape[0])
    lp = logits[b, position].float().log_softmax(-1)
    return lp[b, wrong] - lp[b, correct]


@attack("mantis", display="MANTIS", pathway="pixel", role="enhanced", enhances=("vis_pgd", "end_pgd"),
        uses_wrong=True, union_position=2, default=True, table_position=2)
@dataclass
class MANTIS(PixelAttack):
    OBJECTIVES = ("divergence",)
    STRONG = ("divergence:x3", "square:250")


    def prepare(self, vlm, x, samples):
        pos, wrong_tok, correct_tok, wrong_text = [], [], [], []
        for s in samples:
            w = wrong_answer(s, self.judge)
            c_ids, w_ids = vlm.answer_tokens(s.answer), vlm.answer_tokens(w)
            k = first_divergence(c_ids, w_ids)
            pos.append(k)
            correct_tok.append(c_ids[k])
            wrong_tok.append(w_ids[k])
            wrong_text.append(w)
        return {"position": torch.tensor(pos), "wrong": torch.tensor(wrong_tok), "correct": torch.tensor(correct_tok),
                "wrong_text": wrong_text}

    def objective(self, vlm, x_adv, samples, ctx):
        scores = vlm.score(x_adv, [s.prompt for s in samples], [s.answer for s in samples])
        margin = divergence_margin(scores.logits, ctx["position"], ctx["wrong"], ctx["correct"])
        misses = (scores.logits.argmax(-1) != scores.targets) & scores.mask
        return margin, misses.any(-1).detach()
