"""Index-hinted families (orl/eval/tasks/hinted.py): hand-computed answers, the v7 ranges and beyond
splits, unique markers, and answers that fit tiny_model7's context."""
import re

import pytest

from orl.eval.tasks import get_task
from orl.tokenizer import CharTokenizer


@pytest.mark.parametrize("name,prompt,answer,size", [
    ("long7x", "cumsum:a3b1c4=", "a3b4c8", 3),
    ("long7x", "cumsum:Y9Z9a1=", "Y9Z18a19", 3),
    ("prog7x", "echo d=3;e=d+4;f=e-2:", "d=3,e=7,f=5", 3),
    ("prog7x", "echo x=9;y=0+x:", "x=9,y=9", 2),
    ("long7xp", "cumsum:a3b1c4=a", "3b4c8", 3),   # prefilled: the prompt ends with the first marker
    ("prog7xp", "echo d=3;e=d+4;f=e-2:d", "=3,e=7,f=5", 3),
    ("prog7xph", "echo d=3;e=4+1;f=9-2:d", "=3,e=5,f=7", 3),
    ("long7xph", "double:a3b1c9=a", "6b2c18", 3),
    ("long7xpo", "cumsum+137:a3b1c4=a", "140b141c145", 3),
    ("long7xpo", "cumsum+0:Y9Z9=Y", "9Z18", 2),
    ("long7xpf", "cumsum:a3b1c4   =a", "3b4c8", 3),
    ("long7xpf", "cumsum:Y9Z9=Y", "9Z18", 2),
    ("prog7xpf", "echo d=3;e=d+4;f=e-2     :d", "=3,e=7,f=5", 3),
    ("prog7xpf", "echo x=9;y=0+x:x", "=9,y=9", 2),
])
def test_hand_computed(name, prompt, answer, size):
    task = get_task(name)
    assert task.verify(prompt, answer)
    assert not task.verify(prompt, answer[:-1]) and not task.verify(prompt, answer + "1")
    assert task.size(prompt) == size


@pytest.mark.parametrize("name,prompt,match", [
    ("long7x", "cumsum:314=", "not a long_hints prompt"), ("long7xp", "cumsum:a3b1=b", "not a long_hints prompt"),
    ("long7xp", "cumsum:a3b1=", "not a long_hints prompt"), ("prog7xp", "echo d=3;e=d+4:e", "not a prog_fresh prompt"),
    ("prog7xph", "echo d=3;e=d+4:d", "not a prog7xph prompt"), ("long7xph", "double:a3b1=b", "not a long7xph prompt"),
    ("long7xpo", "cumsum+07:a3b1=a", "not a long7xpo prompt"), ("long7xpo", "cumsum+7:a3b1=b", "not a long7xpo prompt"),
    ("long7xpo", "cumsum+1000:a3b1=a", "not a long7xpo prompt"), ("long7xpo", "cumsum:a3b1=a", "not a long7xpo prompt"),
    ("long7xpo", "cumsum+200:a3b1=a", "not a long7xpo prompt"), ("long7xpo", "cumsum+5:a1a2=a", "not a long7xpo prompt"),
    ("long7xpo", "cumsum+5:a1c2=a", "not a long7xpo prompt"),
    ("long7xpf", "cumsum:a3b1" + " " * 41 + "=a", "not a long7xpf prompt"), ("long7xpf", "cumsum:a3 b1=a", "not a long7xpf prompt"),
    ("long7xpf", "cumsum:a3b1 =b", "not a long7xpf prompt"),
    ("prog7xpf", "echo d=3;e=d+4" + " " * 41 + ":d", "not a prog7xpf prompt"),
    ("prog7xpf", "echo d=3;e=d+4 :e", "not a prog7xpf prompt"), ("prog7xpf", "echo d=3; e=d+4:d", "not a prog7xpf prompt"),
    ("prog7xpf", "echo d=3;e=4+1  :d", "not a prog7xpf prompt"),
    # prog7x is strict: fresh consecutive variables, each statement reading the previous one, echo form only
    ("prog7x", "echo a=3;a=a+1:", "not a prog_fresh prompt"), ("prog7x", "a=3;b=a+1;b?", "not a prog_fresh prompt"),
    ("prog7x", "echo a=3;b=a*2:", "not a prog_fresh prompt"), ("prog7x", "echo a=3;c=a+1:", "not a prog_fresh prompt"),
    ("prog7x", "echo a=3;b=4+1:", "not a prog_fresh prompt")])
def test_malformed_prompts_are_named(name, prompt, match):
    with pytest.raises(ValueError, match=match):
        get_task(name).verify(prompt, "3")


@pytest.mark.parametrize("split,lo,hi", [("train", 4, 20), ("heldout", 4, 20), ("beyond", 21, 28)])
def test_long7x_sizes_and_markers(split, lo, hi):
    task, tok = get_task("long7x"), CharTokenizer()
    sizes = set()
    for i in range(200):
        s = task.sample(split, i)
        marks = re.findall(r"[a-zA-Z]", s.prompt[len("cumsum:"):])
        assert len(set(marks)) == len(marks) == task.size(s.prompt)  # unique, one per digit
        assert re.findall(r"[a-zA-Z]", s.answer) == marks              # the answer repeats them in order
        assert len(tok.encode(s.prompt)) + len(s.answer) + 1 <= 192 and len(s.answer) + 1 <= 112
        sizes.add(task.size(s.prompt))
    assert min(sizes) >= lo and max(sizes) <= hi and len(sizes) > (hi - lo) // 2


@pytest.mark.parametrize("name", ["prog7x", "prog7xp"])
@pytest.mark.parametrize("split,lo,hi", [("train", 2, 7), ("beyond", 8, 10)])
def test_prog7x_fresh_chain(name, split, lo, hi):
    task = get_task(name)
    for i in range(200):
        s = task.sample(split, i)
        if name == "prog7xp":  # the first variable closes the prompt and opens nothing else
            assert s.prompt[-1] == s.prompt[len("echo ")] and s.answer[0] == "="
            s = type(s)(s.task, s.split, s.index, s.prompt[:-1], s.prompt[-1] + s.answer)
        statements = s.prompt[len("echo "):-1].split(";")
        targets = [st[0] for st in statements]
        assert lo <= len(statements) <= hi and len(set(targets)) == len(targets)
        assert all(ord(b) == ord(a) + 1 for a, b in zip(targets, targets[1:]))  # a run of consecutive letters
        for prev, st in zip(targets, statements[1:]):
            assert set(re.findall(r"[a-z]", st[2:])) == {prev}                 # reads the previous variable
        assert all(0 <= int(v.split("=")[1]) <= 99 for v in s.answer.split(","))


@pytest.mark.parametrize("name", ["long7x", "long7xp", "prog7xph", "long7xph", "long7xpo", "long7xpf", "prog7xpf"])
def test_size_of_a_foreign_prompt_is_an_error(name):
    with pytest.raises(ValueError, match="not a"):
        get_task(name).size("hello")


def test_hinted_splits_are_disjoint_from_each_other():
    task = get_task("long7x")
    train = {task.sample("train", i).prompt for i in range(300)}
    assert not train & {task.sample("heldout", i).prompt for i in range(100)}


@pytest.mark.parametrize("name,family,sizes", [("prog7xph", "prog7xp", range(2, 15)), ("long7xph", "long7xp", range(4, 33)),
                                               ("long7xpo", "long7xp", range(2, 13)), ("long7xpf", "long7xp", range(4, 21)),
                                               ("prog7xpf", "prog7xp", range(2, 8))])
def test_hint_helpers_are_training_only(name, family, sizes):
    from orl.eval.tasks import HELPER_NAMES
    from orl.train.rollout import trained_tasks

    task, tok = get_task(name), CharTokenizer()
    drawn = [task.sample("train", i) for i in range(600)]
    assert {task.size(s.prompt) for s in drawn} == set(sizes)  # the length helpers reach the family's beyond split
    assert all(len(tok.encode(s.prompt + s.answer)) + 1 <= 192 for s in drawn)  # a training row fits the context
    assert name in HELPER_NAMES and trained_tasks({"recipe": {"config": {"tasks": [family, name]}}}) == (family,)


def test_prog7xph_reads_no_variable():
    task = get_task("prog7xph")
    for i in range(100):  # literal statements only: no statement reads a variable
        s = task.sample("train", i)
        assert not re.search(r"=[^;:]*[a-z]", s.prompt[len("echo "):-2])


def test_long7xpo_trains_the_values_long7xp_needs_beyond_its_range():
    """long7xp's beyond split needs running sums past 100 that its range rarely reaches; the offset helper
    writes them at the range's lengths (12 digits at most, never a beyond-size prompt)."""
    task, family = get_task("long7xpo"), get_task("long7xp")

    def sums(s):
        return [int(v) for v in re.findall(r"[0-9]+", s.prompt[-1] + s.answer)]

    helper = [v for i in range(400) for v in sums(task.sample("train", i))]
    beyond = [v for i in range(400) for v in sums(family.sample("beyond", i))]
    in_range = [v for i in range(400) for v in sums(family.sample("train", i))]
    assert max(beyond) > 150 and sum(v >= 100 for v in in_range) < 0.1 * len(in_range)
    assert sum(100 <= v <= max(beyond) for v in helper) > 0.4 * len(helper)


def test_long7xpf_moves_the_items_away_from_the_answer():
    """The distance helper draws 0-40 spaces before the '=', so the distance from the answer to item k varies
    at every size; the items, sums and answers are long7xp's at its own range."""
    task, tok = get_task("long7xpf"), CharTokenizer()
    drawn = [task.sample("train", i) for i in range(400)]
    gaps = {len(re.search(r"( *)=", s.prompt)[1]) for s in drawn}
    assert min(gaps) == 0 and max(gaps) == 40 and len(gaps) > 30
    family = get_task("long7xp")
    for s in drawn[:50]:
        plain = re.sub(r" +=", "=", s.prompt)
        assert family.verify(plain, s.answer)  # the same answer as long7xp's without the spaces
    assert all(len(tok.encode(s.prompt)) + 100 <= 192 for s in drawn)  # a greedy AR eval of 100 new tokens fits (not 7 blocks of 16)


def test_long7xp_value_and_distance_helpers_never_train_on_its_held_out_prompts():
    """Without its spaces a long7xpf prompt is a long7xp prompt with the same answer, and so is a long7xpo prompt
    at offset 0: both are split as long7xp splits them."""
    filler, offset, family = get_task("long7xpf"), get_task("long7xpo"), get_task("long7xp")
    for split in ("train", "heldout"):
        for i in range(300):
            assert family.split_of(re.sub(r" +=", "=", filler.sample(split, i).prompt)) == split
    held = [family.sample("heldout", i).prompt for i in range(20)]
    assert all(offset.split_of(p.replace("cumsum:", "cumsum+0:")) == "heldout" for p in held)
    assert {offset.split_of(p.replace("cumsum:", "cumsum+7:")) for p in held} == {"train", "heldout"}  # own hash


def test_prog7xpf_moves_the_statements_away_from_the_answer():
    """prog7xp's distance helper: 0-40 spaces before the ':', so the distance from the answer to statement k
    varies at every size; without them a prompt is prog7xp's, with the same answer and the same split."""
    task, family, tok = get_task("prog7xpf"), get_task("prog7xp"), CharTokenizer()
    drawn = [(split, task.sample(split, i)) for split in ("train", "heldout") for i in range(300)]
    gaps = {len(re.search(r"( *):", s.prompt)[1]) for _, s in drawn}
    assert min(gaps) == 0 and max(gaps) == 40 and len(gaps) > 30
    for split, s in drawn:
        plain = re.sub(r" +:", ":", s.prompt)
        assert family.verify(plain, s.answer) and family.split_of(plain) == split
    # a greedy AR eval of 100 new tokens fits tiny_model7's context
    assert all(len(tok.encode(s.prompt)) + 100 <= 192 for _, s in drawn)
