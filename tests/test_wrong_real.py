"""Task-matching wrong answers on loader-shaped records of ChartQA, DocVQA and MME, and `mmaudit data wrong`."""

import json
import re

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.loaders import load_chartqa, load_docvqa, load_mme
from mmaudit.data.sample import Layout, Sample, TextElement
from mmaudit.judge.match import Judge
from mmaudit.pathways.answer_kinds import COUNTRIES, answer_kind
from mmaudit.pathways.wrong import assign_wrong_answers, choose_wrong

CHARTQA = [("What was the share in 2019?", "45%"), ("What is the value for Spain?", "12.5"),
           ("How many units were sold?", "1,234"), ("In which year was the peak?", "2019"),
           ("Which country has the highest value?", "Germany"), ("Which country has the lowest value?", "Spain"),
           ("Which party won the most seats?", "Democrats"), ("Which party came second?", "Republicans"),
           ("Which party came last?", "Greens"), ("How much was the revenue?", "$3.5 million"),
           ("What is the median age?", "38"), ("Is the value rising?", "Yes")]
DOCVQA = [("What is the date of the memo?", ["12/05/2019", "12-05-2019"]), ("When was it signed?", ["May 1, 1999"]),
          ("What time does the meeting start?", ["10:30 AM"]), ("What is the total amount?", ["$1,234.50"]),
          ("What is the weight?", ["15 kg"]), ("What is the name of the company?", ["ITC Limited"]),
          ("Which company sent the letter?", ["Lorillard Tobacco"]), ("Who signed the letter?", ["John Smith"]),
          ("What is the phone number?", ["4217"]), ("In which month was it sent?", ["March"])]


def png(path, text_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (360, 60 + 50 * len(text_lines)), "white")
    d = ImageDraw.Draw(im)
    for i, t in enumerate(text_lines):
        d.text((20, 20 + 50 * i), t, fill="black", font=ImageFont.load_default(size=36))
    im.save(path)


def chartqa_file(tmp_path):
    png(tmp_path / "test" / "png" / "c.png")
    recs = [{"imgname": "c.png", "query": q, "label": a} for q, a in CHARTQA]
    path = tmp_path / "test" / "test_human.json"
    path.write_text(json.dumps(recs))
    return path


def check(samples):
    """Every wrong answer: judged wrong against every reference, of the reference's kind, deterministic."""
    judge = Judge()
    for s in samples:
        w = s.meta["wrong_answer"]
        assert not any(judge(w, r, s.task_family, s.answer_type) for r in s.references), (s.id, s.answer, w)
        assert answer_kind(w) == answer_kind(s.answer), (s.answer, w)
        assert choose_wrong(s, judge, None).kind == s.meta["wrong_kind"]
        if answer_kind(s.answer) == "year":
            assert 1000 <= int(w) <= 2100
        if answer_kind(s.answer) not in ("text", "yes/no", "date", "time"):  # the written form stays: only digits
            assert re.sub(r"\d+", "#", w) == re.sub(r"\d+", "#", s.answer), (s.answer, w)


def test_chartqa_numbers_years_names(tmp_path):
    samples = list(load_chartqa(chartqa_file(tmp_path)))
    assert assign_wrong_answers(samples) == []
    check(samples)
    by = {s.answer: s.meta for s in samples}
    assert by["45%"]["wrong_answer"].endswith("%") and by["45%"]["wrong_kind"] == "percentage"
    assert re.fullmatch(r"\d,\d{3}", by["1,234"]["wrong_answer"])
    assert re.fullmatch(r"\d+\.\d", by["12.5"]["wrong_answer"])
    assert re.fullmatch(r"\$\d\.\d million", by["$3.5 million"]["wrong_answer"])
    assert by["Germany"]["wrong_answer"] in COUNTRIES and by["Germany"]["wrong_source"] == "class"
    # a party for a party: another answer of the dataset, given to questions about parties
    assert by["Democrats"]["wrong_answer"] in ("Republicans", "Greens")
    assert by["Democrats"]["wrong_source"] == "vocabulary"
    assert by["Yes"]["wrong_answer"] == "No"
    again = list(load_chartqa(chartqa_file(tmp_path)))
    assign_wrong_answers(again)
    assert [s.meta["wrong_answer"] for s in again] == [s.meta["wrong_answer"] for s in samples]


def test_docvqa_dates_times_money_units_names(tmp_path):
    png(tmp_path / "documents" / "d.png")
    data = {"data": [{"questionId": i, "question": q, "answers": a, "image": "documents/d.png"}
                     for i, (q, a) in enumerate(DOCVQA)]}
    (tmp_path / "val.json").write_text(json.dumps(data))
    samples = list(load_docvqa(tmp_path / "val.json"))
    assign_wrong_answers(samples)
    check(samples)
    by = {s.answer: s.meta["wrong_answer"] for s in samples}
    assert re.fullmatch(r"\d\d/\d\d/\d{4}", by["12/05/2019"])
    assert re.fullmatch(r"May \d{1,2}, \d{4}|[A-Z][a-z]+ \d{1,2}, \d{4}", by["May 1, 1999"])
    assert re.fullmatch(r"\d{1,2}:\d\d [AP]M", by["10:30 AM"])
    assert re.fullmatch(r"\$\d,\d{3}\.\d\d", by["$1,234.50"]) and re.fullmatch(r"\d+ kg", by["15 kg"])
    assert by["ITC Limited"] == "Lorillard Tobacco"  # the other answer to a company question
    assert by["March"] in ("January", "February", "April", "May", "June", "July", "August", "September",
                           "October", "November", "December")
    assert re.fullmatch(r"\d{4}", by["4217"])


def test_mme_yes_no(tmp_path):
    art = tmp_path / "artwork"
    png(art / "images" / "1.jpg")
    (art / "questions_answers_YN").mkdir(parents=True)
    (art / "questions_answers_YN" / "1.txt").write_text("Is this by Monet?\tYes\nIs this a photo?\tNo\n")
    samples = list(load_mme(tmp_path))
    assign_wrong_answers(samples)
    assert [s.meta["wrong_answer"] for s in samples] == ["No", "Yes"]


def test_a_legend_entry_for_a_legend_entry_from_layout_metadata():
    legend = [TextElement(t, (0, 20 * i, 40, 20 * i + 10), "f", 9, (0, 0, 0), "legend") for i, t in
              enumerate(["Apples", "Oranges", "Pears"])]
    title = TextElement("Fruit sold in 2020 by shop", (0, 80, 90, 90), "f", 9, (0, 0, 0), "title")
    lay = Layout(size=(100, 100), cell=10, background=(255, 255, 255), texts=legend + [title])
    s = Sample("c1", np.zeros((100, 100, 3), np.uint8), "Which fruit sold most?", "Oranges", "free text", "chartqa",
               lay)
    w = choose_wrong(s)
    assert w.text in ("Apples", "Pears") and w.source == "image"


def test_a_legend_entry_for_a_legend_entry_from_ocr(tmp_path):
    pytest.importorskip("rapidocr")
    from mmaudit.pathways.wrong import default_ocr

    png(tmp_path / "legend.png", ["Apples", "Oranges", "Pears"])
    image = np.asarray(Image.open(tmp_path / "legend.png").convert("RGB"))
    s = Sample("c2", image, "Which fruit sold most?", "Oranges", "free text", "chartqa")
    w = choose_wrong(s, ocr=default_ocr())
    assert w.text in ("Apples", "Pears") and w.source == "image"


def test_data_wrong_json_on_chartqa_annotations(tmp_path):
    path = chartqa_file(tmp_path)
    res = CliRunner().invoke(app, ["data", "wrong", "--data", f"chartqa:{path}", "--json", "--wrong-ocr", "off"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert len(rows) == len(CHARTQA) and set(rows[0]) >= {"id", "reference", "wrong", "answer_type"}
    j = Judge()
    for r in rows:
        assert not j(r["wrong"], r["reference"], "chartqa", "free text") and r["wrong"] != r["reference"]
        assert answer_kind(r["wrong"]) == answer_kind(r["reference"]), r
    texts = {r["reference"]: r["wrong"] for r in rows if r["answer_type"].startswith("text")}
    labels = {a for _, a in CHARTQA}
    assert all(w in labels or w in COUNTRIES for w in texts.values()), texts  # another label, not random letters
    table = CliRunner().invoke(app, ["data", "wrong", "--data", f"chartqa:{path}", "--wrong-ocr", "off"])
    assert table.exit_code == 0 and "Germany" in table.output and "by source" in table.output


MIXED = [("Which group leans left?", "Democrat (scores 60 to 100)"), ("Which age group grew?", "Ages 18-29"),
         ("Which disease is shown?", "COVID-19"), ("Which quarter peaked?", "2019 Q3"),
         ("Which bracket is largest?", "Top 10%"), ("Which party won?", "Democrats"),
         ("Which region is smallest?", "North East"), ("What is the value?", "42")]


def test_data_wrong_gives_mixed_word_and_number_labels_another_label_of_the_file(tmp_path):
    """A textual label that carries numbers draws another label of the dataset like any textual label, even when
    no label of the file has its shape; random letters never appear while the file offers labels."""
    png(tmp_path / "test" / "png" / "c.png")
    path = tmp_path / "test" / "test_human.json"
    path.write_text(json.dumps([{"imgname": "c.png", "query": q, "label": a} for q, a in MIXED]))
    res = CliRunner().invoke(app, ["data", "wrong", "--data", f"chartqa:{path}", "--json", "--wrong-ocr", "off"])
    assert res.exit_code == 0, res.output
    rows = {r["reference"]: r for r in json.loads(res.output)}
    labels = {a.lower() for _, a in MIXED}
    j = Judge()
    for ref in ("Democrat (scores 60 to 100)", "Ages 18-29", "COVID-19", "2019 Q3", "Top 10%", "Democrats",
                "North East"):
        r = rows[ref]  # another label of the file (written in the reference's case pattern)
        assert r["wrong"].lower() in labels - {ref.lower()} and r["source"] != "random", r
        assert not j(r["wrong"], ref, "chartqa", "free text")
    table = CliRunner().invoke(app, ["data", "wrong", "--data", f"chartqa:{path}", "--wrong-ocr", "off"])
    assert "random" not in table.output.split("by source:")[1]  # the per-source count says none fell through


def test_random_letters_only_where_neither_the_file_nor_the_image_offers_text():
    s = Sample("lonely", np.full((40, 40, 3), 255, np.uint8), "Which group?", "Democrat (scores 60 to 100)",
               "free text", "chartqa")
    w = choose_wrong(s, vocabulary=[])
    assert w.source == "random" and not Judge()(w.text, s.answer, "chartqa", "free text")
