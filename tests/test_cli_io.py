import json

import pytest
from typer.testing import CliRunner

from mmaudit.cli import app
from mmaudit.data.io import read_jsonl, write_samples
from mmaudit.data.synthetic import synthetic_set
from mmaudit.errors import InputError


def test_zoo_eval_json():
    res = CliRunner().invoke(app, ["zoo", "eval", "--json", "--n", "5", "--level", "L1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"L1"} and {"charts", "documents", "scenes", "reading", "overall"} <= set(out["L1"])


def test_samples_roundtrip_and_bad_rows(tmp_path):
    samples = synthetic_set(2, seed=0)
    path = write_samples(samples, tmp_path)
    back = read_jsonl(path)
    assert [s.question for s in back] == [s.question for s in samples]
    assert all((a.image == b.image).all() for a, b in zip(back, samples))
    (tmp_path / "junk.png").write_text("not a png")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "q7", "image": "junk.png", "question": "a ?", "answer": "1"}) + "\n")
    with pytest.raises(InputError, match="'q7'.*'image'.*not a readable image"):
        read_jsonl(bad)
    bad.write_text(json.dumps({"id": "q8", "image": "images/x.png", "question": "", "answer": "1"}) + "\n")
    with pytest.raises(InputError, match="'q8'.*'image'.*not found"):
        read_jsonl(bad)
    bad.write_text(json.dumps({"id": "q9", "image": path.parent.joinpath("images").iterdir().__next__().name}))
    with pytest.raises(InputError, match="'q9'.*'question'.*missing"):
        read_jsonl(bad)


def test_log_progress_says_each_stage_at_start_end_and_every_interval_with_the_latest_count(capsys):
    """Output to a log: a line when a stage starts and ends, and a heartbeat that repeats the latest count (not the
    last one said) with what else moves; a hidden stage says nothing."""
    import time

    from mmaudit.cli.common import LogProgress

    bar = LogProgress(every=3600)
    bar.counts = lambda: {"requests answered": 7}
    a = bar.add_task("rows", 4)
    for _ in range(3):
        bar.advance(a)  # the first is said (a start), the next two fall inside the interval
    bar.add_task("hidden", 2, visible=False)
    bar.advance(1, 2)
    bar.every = 0.0
    time.sleep(0.01)
    bar.beat()  # the unfinished stage, with its latest count and the counts
    bar.every = 3600
    bar.advance(a)  # its end is always said
    lines = [x.split("] ", 1)[1] for x in capsys.readouterr().out.splitlines()]
    assert [x.split(",")[0] for x in lines] == ["rows: 1/4", "rows: 3/4", "rows: 4/4"]
    assert "7 requests answered" in lines[1] and "hidden" not in "".join(lines)
