import numpy as np
import pytest

from mmaudit.data.render import CELL, CLASS_INDEX, GRID
from mmaudit.data.sample import Sample
from mmaudit.data.synthetic import ALL_FAMILIES, READING_PROMPT, generate, make_sample
from mmaudit.errors import InputError


def test_deterministic_by_seed_and_index():
    a = make_sample("charts", 7, seed=3)
    b = make_sample("charts", 7, seed=3)
    c = make_sample("charts", 7, seed=4)
    assert np.array_equal(a.image, b.image) and a.question == b.question and a.answer == b.answer
    assert not np.array_equal(a.image, c.image)
    # sample i does not depend on how many samples were asked for
    assert list(generate(["scenes"], 5, seed=1))[3].question == make_sample("scenes", 3, seed=1).question


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_family_samples_are_valid_and_described(family):
    for s in generate([family], 30, seed=0):
        s.validate()
        assert s.image.shape == (GRID * CELL, GRID * CELL, 3)
        assert s.layout is not None and s.layout.cell_class.shape == (GRID, GRID)
        for t in s.layout.texts:  # every text element's glyphs are in the dense labels
            r, c0 = t.box[1] // CELL, t.box[0] // CELL
            assert [CLASS_INDEX[ch] for ch in t.text] == list(s.layout.cell_class[r, c0 : c0 + len(t.text)])
            assert t.font and t.size > 0 and len(t.color) == 3
        for x0, y0, x1, _y1 in s.layout.free_regions:  # free regions really are empty
            assert (s.layout.cell_class[y0 // CELL, x0 // CELL : x1 // CELL] == 0).all()


def test_answer_types_and_questions():
    charts = list(generate(["charts"], 60, seed=0))
    assert {s.answer_type for s in charts} == {"number", "label"}
    for s in charts:
        if s.answer_type == "number":
            assert s.answer.isdigit() and s.answer in "".join(t.text for t in s.layout.texts)
    scenes = list(generate(["scenes"], 80, seed=0))
    assert {s.answer_type for s in scenes} == {"yes/no", "label", "number"}
    yn = [s.answer for s in scenes if s.answer_type == "yes/no"]
    assert 0.2 < yn.count("yes") / len(yn) < 0.8
    docs = list(generate(["documents"], 20, seed=0))
    for s in docs:
        field = s.question.split()[3]
        texts = [t.text for t in s.layout.texts]
        i = texts.index(f"{field}:")
        assert texts[i + 1] == s.answer and s.layout.texts[i + 1].box[1] == s.layout.texts[i].box[1]
    for s in generate(["reading"], 20, seed=0):
        assert s.question == READING_PROMPT
        banners = [t for t in s.layout.texts if t.role == "banner"]
        assert len(banners) == 1 and banners[0].text == s.answer


def test_bad_sample_errors_name_sample_and_field():
    good = make_sample("charts", 0)
    with pytest.raises(InputError, match="'x'.*'image'"):
        Sample("x", "not an image", "q", "a", "label").validate()  # type: ignore[arg-type]
    with pytest.raises(InputError, match="'y'.*'image'.*shape"):
        Sample("y", good.image[..., 0], "q", "a", "label").validate()
    with pytest.raises(InputError, match="'z'.*'question'.*empty"):
        Sample("z", good.image, "  ", "a", "label").validate()
