import pytest

from mmaudit.data.sample import Layout, Sample, TextElement
from mmaudit.data.synthetic import make_sample
from mmaudit.judge import Judge, anls, exact_match, relaxed_match, yes_no_match
from mmaudit.pathways.wrong import first_divergence, wrong_answer


def test_judge_rules():
    assert relaxed_match("48", "47") and not relaxed_match("50", "47")
    assert relaxed_match("12.4%", "12.0%") and relaxed_match("Paris.", "paris")
    assert not relaxed_match("2001", "1999")  # years compared exactly
    assert anls("4217", "4218") > 0.5 and anls("42", "43") == 0.0
    assert yes_no_match("Yes, there is.", "yes") and not yes_no_match("no", "yes")
    assert exact_match("  RED ", "red")
    j = Judge()
    assert j("no", "yes", "scenes", "yes/no") is False
    assert j("48", "47", "charts", "number") is True
    assert j("48", "47", "scenes", "number") is False


def sample(answer, atype, family="charts", labels=()):
    texts = [TextElement(x, (0, 0, 8, 8), "f", 9, (0, 0, 0), "label") for x in labels]
    lay = Layout(size=(64, 64), cell=8, background=(255, 255, 255), texts=texts)
    return Sample(f"s-{answer}", make_sample("charts", 0).image, "q ?", answer, atype, family, lay)


@pytest.mark.parametrize(
    "answer,atype,family",
    [("47", "number", "charts"), ("7", "number", "scenes"), ("4217", "number", "documents"),
     ("45%", "number", "charts"), ("12.5", "number", "charts"), ("1999", "number", "charts"),
     ("$300", "number", "documents"), ("yes", "yes/no", "scenes"), ("No", "yes/no", "mme"),
     ("green", "label", "scenes"), ("HELLO", "free text", "reading"), ("K", "label", "charts")],
)
def test_wrong_answers_are_wrong_same_type_and_deterministic(answer, atype, family):
    j = Judge()
    s = sample(answer, atype, family, labels=("K", "Q", "Z"))
    w = wrong_answer(s, j)
    assert w == wrong_answer(s, j)
    assert not j(w, answer, family, atype)
    if atype == "number":
        assert w[-1:] == answer[-1:] if answer.endswith("%") else w.replace(".", "").lstrip("$").isdigit()
        assert len(w) == len(answer) or answer == "1999"
    if atype == "yes/no":
        assert w.lower() in ("yes", "no") and w.lower() != answer.lower()
    if answer == "K":
        assert w in ("Q", "Z")  # another label of the same image
    if answer == "HELLO":
        assert len(w) == 5 and w.isupper()


def test_wrong_answers_on_every_synthetic_sample():
    from mmaudit.data.synthetic import ALL_FAMILIES, generate

    j = Judge()
    for s in generate(ALL_FAMILIES, 40, seed=0):
        w = wrong_answer(s, j)
        assert not j(w, s.answer, s.task_family, s.answer_type), (s.id, s.answer, w)


def test_first_divergence():
    assert first_divergence([5, 6, 7], [5, 9, 7]) == 1
    assert first_divergence([5, 6], [5, 6, 2]) == 2
    with pytest.raises(ValueError):
        first_divergence([1], [1])


def test_docvqa_numbers_are_compared_as_numbers():
    j = Judge()
    assert not j("4218", "4217", "docvqa") and j("4,217", "4217", "docvqa") and j("4217.", "4217", "docvqa")
    assert not j("£8 million", "£5 million", "docvqa") and j("£5 million", "£5 million", "docvqa")
    assert not j("13/05/2019", "12/05/2019", "docvqa") and j("12/05/2019", "12/05/2019", "docvqa")
    assert j("ITC Limted", "ITC Limited", "docvqa")  # text keeps ANLS's tolerance
    assert Judge(numeric_exact=False)("4218", "4217", "docvqa")  # plain ANLS, on request


def test_p_use_matches_whole_words():
    from mmaudit.pathways.text.runner import contains

    assert not contains("nothing here", "no") and contains("No, it is not.", "no")
    assert not contains("1200", "120") and contains("the value is 120.", "120")
    assert contains("it is new york.", "New York") and contains("NEWYORK", "NEW YORK")  # glyph tokenizers
    assert not contains("anything", "")
