"""The bundled mini benchmark: 8 authored questions over 4 topics, images rendered locally with Pillow."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
from PIL import Image, ImageDraw

from mmaudit.data.render import font
from mmaudit.rag.construct.inputs import ImageInput, QuestionInput
from mmaudit.rag.construct.records import TextEvidence

SIZE = (320, 240)  # width, height


def _emblem(draw: ImageDraw.ImageDraw, kind: str, colour: tuple[int, int, int]) -> None:
    cx, cy = SIZE[0] // 2, 140
    if kind == "tower":
        draw.polygon([(cx, 50), (cx + 45, 215), (cx - 45, 215)], outline=colour, width=6)
        for y in (110, 160):
            draw.line([(cx - 30 * (y - 50) / 165 - 8, y), (cx + 30 * (y - 50) / 165 + 8, y)], fill=colour, width=5)
    elif kind == "bridge":
        draw.arc((40, 80, 280, 260), 180, 360, fill=colour, width=6)
        draw.rectangle((30, 170, 290, 180), fill=colour)
        for x in (95, 225):
            draw.rectangle((x - 5, 75, x + 5, 215), fill=colour)
    elif kind == "leaf":
        draw.ellipse((cx - 70, 80, cx + 70, 200), fill=colour)
        draw.line([(cx - 60, 190), (cx + 60, 90)], fill=(250, 250, 230), width=4)
    elif kind == "flask":
        draw.polygon([(cx - 15, 70), (cx + 15, 70), (cx + 15, 120), (cx + 60, 210), (cx - 60, 210), (cx - 15, 120)],
                     fill=colour)
    elif kind == "rings":
        for i, (dx, dy) in enumerate([(-70, 0), (0, 0), (70, 0), (-35, 35), (35, 35)]):
            c = [(30, 90, 180), (20, 20, 20), (200, 40, 40), (230, 180, 20), (40, 150, 60)][i]
            draw.ellipse((cx + dx - 32, cy - 20 + dy - 32, cx + dx + 32, cy - 20 + dy + 32), outline=c, width=6)
    elif kind == "ball":
        draw.ellipse((cx - 55, 85, cx + 55, 195), fill=(250, 250, 250), outline=colour, width=4)
        draw.regular_polygon((cx, 140, 22), 5, fill=colour)
    elif kind == "press":
        draw.rectangle((cx - 70, 180, cx + 70, 210), fill=colour)
        draw.rectangle((cx - 60, 70, cx - 45, 180), fill=colour)
        draw.rectangle((cx + 45, 70, cx + 60, 180), fill=colour)
        draw.rectangle((cx - 45, 120, cx + 45, 140), fill=colour)
    else:  # moon
        draw.ellipse((cx - 60, 80, cx + 60, 200), fill=colour)
        draw.ellipse((cx - 20, 110, cx + 5, 135), fill=(170, 170, 170))


def render(spec: dict) -> np.ndarray:
    bg = tuple(spec["background"])
    image = Image.new("RGB", SIZE, bg)
    draw = ImageDraw.Draw(image)
    _emblem(draw, spec["emblem"], tuple(spec["colour"]))
    ink = (20, 20, 20) if sum(bg) > 380 else (240, 240, 240)
    draw.text((SIZE[0] // 2, 24), spec["caption"], font=font(22), fill=ink, anchor="mm")
    return np.asarray(image)


def mini_inputs() -> list[QuestionInput]:
    data = json.loads((resources.files("mmaudit.rag.construct.mini") / "questions.json").read_text())
    out = []
    for q in data["questions"]:
        im = q["image"]
        out.append(QuestionInput(
            qid=str(q["qid"]), dataset=data["dataset"], question=q["question"], subject=q["subject"],
            topic=q["topic"], passages=[TextEvidence(**p) for p in q["passages"]],
            images=[ImageInput(alt_text=im["alt_text"], title=im["title"], page_url=im["page_url"],
                               image_url=f"mmaudit://mini/{q['qid']}.png", pixels=render(im))],
            false_caption=q["false_caption"], false_claim=q["false_claim"], false_target=q["false_target"]))
    return out
