"""False captions and image labels from an LLM with the paper's E.6 prompt (caption flip and typography).

Offline, the builder uses authored fields or rules instead; with a chat model it
asks once per question and parses three numbered captions and the ANNOTATION
line, failing loudly (the question is dropped with the reason) on any other shape.
"""

from __future__ import annotations

import re

from mmaudit.models.chat import ChatModel

E6_PROMPT = """Topic: {subject}
Correct image captions:
1. {alt_1}
2. {alt_2}
3. {alt_3}
1) Write 3 SHORT false captions (under 10 words each), numbered 1-3. Each must sound like a real image caption but \
contain a specific factual error (wrong location, wrong name, wrong date).
2) On a new line write: ANNOTATION: <a 5-7 word false image label with a factual error>
Output ONLY the 3 numbered captions and the ANNOTATION line, nothing else."""


def parse_false_captions(reply: str) -> tuple[list[str], str]:
    captions = [m.group(1).strip() for m in re.finditer(r"^\s*[1-3][.)]\s*(.+)$", reply, re.MULTILINE)]
    ann = re.search(r"^\s*ANNOTATION:\s*(.+)$", reply, re.MULTILINE)
    if len(captions) != 3 or not ann:
        raise ValueError(f"E.6 reply has {len(captions)} numbered captions and {'an' if ann else 'no'} ANNOTATION")
    return captions, ann.group(1).strip()


def llm_false_captions(model: ChatModel, subject: str, alts: list[str]) -> tuple[list[str], str]:
    alts = (alts + ["", "", ""])[:3]
    prompt = E6_PROMPT.format(subject=subject, alt_1=alts[0], alt_2=alts[1], alt_3=alts[2])
    return parse_false_captions(model.chat([{"role": "user", "content": prompt}]))
