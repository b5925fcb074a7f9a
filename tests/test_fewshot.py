"""k-shot task prompts (orl/eval/tasks/fewshot.py): the format, the judge, the names, and orl eval on them."""
from __future__ import annotations

import pytest

from orl.eval.runner import EvalSpec, run_eval
from orl.eval.tasks import get_task, make_samples
from orl.eval.tasks.fewshot import FewShot
from test_serve import tiny_checkpoint


def _solved_train_line(task, prompt: str, answer: str) -> bool:
    try:
        return task.split_of(prompt) == "train" and task.verify(prompt, answer)
    except ValueError:  # not a prompt of this family: the cut is elsewhere
        return False


@pytest.mark.parametrize("family", ["split", "keysort", "prog", "constr", "long", "long7", "keysort7"])
def test_prompt_is_k_solved_train_lines_then_the_question(family):
    inner, t = get_task(family), get_task(f"{family}:3shot")
    assert isinstance(t, FewShot) and t.name == f"{family}:3shot"
    s = t.sample("heldout", 5)
    plain = inner.sample("heldout", 5)
    lines = s.prompt.split("\n")
    assert len(lines) == 4 and lines[-1] == plain.prompt and s.answer == plain.answer
    assert (s.task, s.split, s.index) == (f"{family}:3shot", "heldout", 5)
    for line in lines[:3]:  # each shot: a train-split prompt followed by a right answer
        assert any(_solved_train_line(inner, line[:i], line[i:]) for i in range(1, len(line))), line
    assert t.sample("heldout", 5) == s  # fixed by (family, split, index)
    assert t.sample("heldout", 6).prompt.split("\n")[:3] != lines[:3]


def test_output_is_judged_up_to_its_first_newline():
    t = get_task("long:2shot")
    s = t.sample("heldout", 0)
    assert t.verify(s.prompt, s.answer)
    assert t.verify(s.prompt, s.answer + "\ncumsum:12=1,3\n")
    assert not t.verify(s.prompt, "\n" + s.answer)
    assert not t.verify(s.prompt, "9" + s.answer)
    assert t.reward(s.prompt, s.answer + "\nx") == 1.0


def test_beyond_prompts_get_in_range_shots():
    t = get_task("long7:2shot")
    s = t.sample("beyond", 0)
    *shots, question = s.prompt.split("\n")
    assert t.size(s.prompt) == get_task("long7").size(question) >= 21
    assert all(4 <= get_task("long7").size(line.split("=")[0] + "=") <= 20 for line in shots)


@pytest.mark.parametrize("name,match", [("long:0shot", "shots must be in 1..64"), ("long:65shot", "1..64"),
                                        ("nosuch:3shot", "unknown task 'nosuch:3shot'"),
                                        ("long:3shots", "unknown task")])
def test_bad_names_are_refused(name, match):
    with pytest.raises(ValueError, match=match):
        get_task(name)


def test_orl_eval_keeps_k_shot_and_zero_shot_records_apart(tmp_path):
    ckpt = tiny_checkpoint(tmp_path)
    out = tmp_path / "r.jsonl"
    common = dict(model=str(ckpt), out=str(out), limit=2, batch_size=2, progress=False,
                  decode={"max_new_tokens": 16})
    zero = run_eval(EvalSpec(tasks=["split"], **common))
    two = run_eval(EvalSpec(tasks=["split:2shot"], **common))
    assert [r["task"] for r in zero] == ["split"] * 2 and [r["task"] for r in two] == ["split:2shot"] * 2
    assert [r["prompt"].count("\n") for r in two] == [2, 2]
    assert [r["prompt"].split("\n")[-1] for r in two] == [r["prompt"] for r in zero]
    assert [s.prompt for s in make_samples("split:2shot", "heldout", 2)] == [r["prompt"] for r in two]
    assert len(out.read_text().splitlines()) == 4  # the second run resumed nothing of the first
