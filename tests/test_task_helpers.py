"""Helper families (orl/eval/tasks/helpers.py): hand-computed answers, strict verifiers, and sizes that
cover the `beyond` split of the v7 family each one helps."""
import random

import pytest

from orl.eval.tasks import TASKS, get_task
from orl.eval.tasks.helpers import HELPERS
from orl.tokenizer import CharTokenizer

HAND = [
    ("double", "double:3719=", "6,14,2,18"),
    ("dup", "dup:1409=", "1409+1409"),
    ("pick", "pick3:b1,a3,e3=", "ae"),
    ("pick", "pick1:b1,a3,e3,k1=", "bk"),
    ("calc", "calc a=9;c=3+4;b=8-2:", "a=9,c=7,b=6"),
    ("calc", "calc b=0-0;b=9+9:", "b=0,b=18"),
    ("cycle", "10 of bdg, cycle:", "bdgbdgbdgb"),
    ("cycle", "3 of ab, cycle:", "aba"),
]


SIZES = {"double:3719=": 4, "dup:1409=": 4, "pick1:b1,a3,e3,k1=": 4, "calc a=9;c=3+4;b=8-2:": 3, "10 of bdg, cycle:": 10}


@pytest.mark.parametrize("name,prompt,answer", HAND)
def test_hand_computed_answers(name, prompt, answer):
    task = get_task(name)
    assert task.verify(prompt, answer)
    assert not task.verify(prompt, answer[:-1])
    assert not task.verify(prompt, answer + answer[-1])
    if prompt in SIZES:
        assert task.size(prompt) == SIZES[prompt]


@pytest.mark.parametrize("name,prompt", [("double", "double:30="), ("dup", "dup:=",), ("pick", "pick6:a1="),
                                         ("pick", "pick1:m1="), ("calc", "calc d=1:"), ("calc", "calc a=12:"),
                                         ("cycle", "3 of AB, cycle:")])
def test_malformed_prompts_are_named(name, prompt):
    with pytest.raises(ValueError, match=f"not a {name} prompt"):
        get_task(name).verify(prompt, "x")


# sizes each helper must reach: past the `beyond` split of the family it helps
REACH = {"double": "long7", "dup": "split7", "pick": "keysort7", "calc": "prog7", "cycle": "constr7"}


@pytest.mark.parametrize("helper", HELPERS, ids=lambda t: t.name)
def test_helpers_cover_their_familys_beyond_sizes_and_verify_their_own_answers(helper):
    assert TASKS[helper.name] is helper
    family = REACH[helper.name]
    rng = random.Random(0)
    sizes = set()
    tok = CharTokenizer()
    for _ in range(2000):
        prompt, answer = helper.generate(rng)
        assert helper.verify(prompt, answer), (prompt, answer)
        tok.encode(prompt + answer)  # only characters the tiny models know
        sizes.add(helper.size(prompt))
    lo, hi = get_task(family).beyond
    assert hi <= max(sizes), f"{helper.name} reaches {max(sizes)}, {family}'s beyond split goes to {hi}"
    assert min(sizes) <= get_task(family).sizes[0]


def test_helper_answers_fit_the_v7_context():
    # tiny_model7's context is 192: the longest helper row (prompt + answer + EOS) must fit
    from orl.presets.pretrain import tiny_model7
    rng = random.Random(1)
    longest = max(sum(map(len, h.generate(rng))) + 1 for h in HELPERS for _ in range(2000))
    assert longest <= tiny_model7().max_seq_len
