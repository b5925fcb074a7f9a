"""benchmarks/text_tasks.py: the text families' answers by hand, held-out rows disjoint from train problems, beyond
sizes past the training range, no example giving its question's answer away, and the files loading as data tasks
whose checker accepts the reference and rejects a changed answer."""
from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from orl.eval.tasks.datafile import load_data_task

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("text_tasks", ROOT / "benchmarks" / "text_tasks.py")
tt = importlib.util.module_from_spec(spec)
sys.modules.setdefault("text_tasks", tt)
spec.loader.exec_module(tt)


class FixedRng(random.Random):
    """randint / choice return scripted values, so a problem's text can be checked by hand."""

    def __init__(self, ints=(), words=()):
        super().__init__(0)
        self.ints, self.words = list(ints), list(words)

    def randint(self, a, b):
        return self.ints.pop(0)

    def choice(self, seq):
        return self.words.pop(0)


def test_problems_by_hand():
    assert tt.problem("copy", FixedRng(words=["red", "sun", "cat"]), 3) == ("copy: red sun cat", " red sun cat")
    assert tt.problem("count", FixedRng(ints=[98]), 4) == ("count 98 to 101", " 98 99 100 101")
    assert tt.problem("upper", FixedRng(words=["blue", "salt"]), 2) == ("upper: blue salt", " BLUE SALT")
    assert tt.problem("reverse", FixedRng(words=["a", "b", "c"]), 3) == ("reverse: a b c", " c b a")
    with pytest.raises(ValueError, match="unknown family"):
        tt.problem("plus", FixedRng(), 2)


@pytest.mark.parametrize("family", tt.FAMILIES)
def test_heldout_disjoint_and_sizes(family):
    (lo, hi), (blo, bhi) = tt.SIZES[family]
    train = tt.rows(family, "train", 200)
    held = tt.rows(family, "heldout", 60, seed=1)
    beyond = tt.rows(family, "heldout", 30, seed=1, beyond=True)
    questions = lambda rs: {r["prompt"].rsplit("\n", 1)[1] for r in rs}  # noqa: E731
    train_problems = {tt.draw(family, "train", i, (lo, hi))[0] + " =" for i in range(tt.N_TRAIN_GUARD)}
    assert not questions(held) & train_problems
    assert all(lo <= r["meta"]["size"] <= hi for r in train + held)
    assert all(blo <= r["meta"]["size"] <= bhi for r in beyond)
    assert len({r["prompt"] for r in train + held + beyond}) == len(train + held + beyond)
    for r in train + held + beyond:
        *shots, question = r["prompt"].split("\n")
        assert len(shots) == 3 and question.endswith(" =")
        assert all(s.split(" =")[0] != question[:-2] for s in shots)  # no example is the question itself
    assert tt.rows(family, "heldout", 5, seed=2) != tt.rows(family, "heldout", 5, seed=1)
    assert tt.rows(family, "heldout", 5, seed=1) == held[:5]   # a pure function of (family, split, seed, index)


def test_files_load_and_verify(tmp_path):
    assert tt.main(["--out-dir", str(tmp_path), "--train", "20", "--heldout", "10", "--families", "count,reverse"]) == 0
    task = load_data_task(f"count={tmp_path / 'count.jsonl'}")
    assert task.count("train") == 20 and task.count("heldout") == 10 and task.stop == ("\n",)
    s = task.sample("heldout", 3)
    assert task.check(s.prompt, s.answer) and task.check(s.prompt, s.answer.lstrip())
    assert not task.check(s.prompt, s.answer + " 1")
    with pytest.raises(SystemExit, match="exists"):
        tt.main(["--out-dir", str(tmp_path), "--families", "count"])
    rows = [json.loads(line) for line in (tmp_path / "reverse.jsonl").read_text().splitlines()]
    assert {r["split"] for r in rows} == {"train", "heldout"}
    with pytest.raises(ValueError, match="beyond"):
        tt.rows("copy", "train", 2, beyond=True)


def test_more_train_rows_than_the_guarded_draws_are_refused(tmp_path):
    # count has ~5.4k problems: 4,096 distinct train rows need draws past the ones held-out rows are checked against
    with pytest.raises(ValueError, match="train draws"):
        tt.rows("count", "train", tt.N_TRAIN_GUARD)
    with pytest.raises(SystemExit, match="train draws"):
        tt.main(["--out-dir", str(tmp_path), "--train", str(tt.N_TRAIN_GUARD), "--families", "count"])
