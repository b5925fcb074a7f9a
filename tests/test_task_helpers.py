"""Helper families (orl/eval/tasks/helpers.py): hand-computed answers, strict parsing, sizes that cover
the `beyond` split of the v7 family each one helps, and no rollouts on them."""
import random

import pytest

from orl.eval.tasks import HELPER_NAMES, TASKS, get_task
from orl.eval.tasks.helpers import HELPERS
from orl.tokenizer import CharTokenizer
from orl.train.rollout import trained_tasks

HAND = [  # name, prompt, answer, size
    ("long7h", "double:3719=", "6,14,2,18", 4),
    ("split7h", "dup:1409=", "1409+1409", 4),
    ("keysort7h", "pick3:b1,a3,e3=", "ae", 3),
    ("keysort7h", "pick1:b1,a3,e3,k1=", "bk", 4),
    ("prog7h", "calc a=9;c=3+4;b=8-2:", "a=9,c=7,b=6", 3),
    ("prog7h", "calc b=0-0;b=9+9:", "b=0,b=18", 2),
    ("constr7h", "10 of bdg, cycle:", "bdgbdgbdgb", 10),
    ("constr7h", "3 of ab, cycle:", "aba", 3),
]


@pytest.mark.parametrize("name,prompt,answer,size", HAND)
def test_hand_computed_answers_and_sizes(name, prompt, answer, size):
    task = get_task(name)
    assert task.verify(prompt, answer)
    assert not task.verify(prompt, answer[:-1])
    assert not task.verify(prompt, answer + answer[-1])
    assert task.size(prompt) == size


@pytest.mark.parametrize("name,prompt", [
    ("long7h", "double:30="), ("split7h", "dup:="), ("split7h", "dup:012="), ("split7h", "dup:x="),
    ("keysort7h", "pick6:a1="), ("keysort7h", "pick1:m1="), ("prog7h", "calc d=1:"), ("prog7h", "calc a=12:"),
    ("constr7h", "3 of AB, cycle:"), ("constr7h", "0 of ab, cycle:"), ("constr7h", "999999999 of ab, cycle:")])
def test_malformed_prompts_are_named(name, prompt):
    task = get_task(name)
    with pytest.raises(ValueError, match=f"not a {name} prompt"):
        task.verify(prompt, "x")
    with pytest.raises(ValueError, match=f"not a {name} prompt"):
        task.size(prompt)


@pytest.mark.parametrize("helper", HELPERS, ids=lambda t: t.name)
def test_helpers_cover_their_familys_beyond_sizes_and_verify_their_own_answers(helper):
    assert TASKS[helper.name] is helper and helper.name == helper.family + "h"
    family = get_task(helper.family)
    rng = random.Random(0)
    sizes = set()
    tok = CharTokenizer()
    for _ in range(2000):
        prompt, answer = helper.generate(rng)
        assert helper.verify(prompt, answer), (prompt, answer)
        tok.encode(prompt + answer)  # only characters the tiny models know
        sizes.add(helper.size(prompt))
    assert max(sizes) >= family.beyond[1], f"{helper.name} reaches {max(sizes)}, {family.name}'s beyond goes to {family.beyond[1]}"
    assert min(sizes) <= family.sizes[0]


def test_helper_rows_fit_the_v7_context():
    from orl.presets.pretrain import tiny_base7h, tiny_model7
    rng = random.Random(1)
    longest = max(sum(map(len, h.generate(rng))) + 1 for h in HELPERS for _ in range(2000))
    assert longest <= tiny_model7().max_seq_len
    answer = max(len(h.generate(rng)[1]) for h in HELPERS for _ in range(2000))
    assert answer < tiny_base7h().eval_max_new_tokens  # the in-training eval sees whole answers


def test_rollouts_and_heldout_means_skip_helpers():
    from orl.presets.pretrain import tiny_base7h
    manifest = {"recipe": {"config": {"tasks": list(tiny_base7h().tasks)}}}
    assert trained_tasks(manifest) == ("split7", "keysort7", "prog7", "constr7", "long7")
    assert not HELPER_NAMES & set(trained_tasks(manifest))


@pytest.mark.parametrize("step", [0, 3500])  # the AR stage, and stage 2's noise too
def test_the_control_trains_on_exactly_the_family_rows_of_the_helper_run(step):
    import torch

    from orl.presets.pretrain import tiny_base7h, tiny_base7h_control
    from orl.tokenizer import CharTokenizer
    from orl.train.pretrain import make_batches, stage_of

    helped, control = tiny_base7h(), tiny_base7h_control()
    assert control.tasks == helped.tasks[:5] and control.samples_per_task == helped.samples_per_task[:5]
    assert stage_of(control, step) == stage_of(helped, step) == ("ar" if step == 0 else "diffusion")
    tok = CharTokenizer()
    a, b = make_batches(helped, tok, step), make_batches(control, tok, step)
    assert len(a) == 10 and len(b) == 5
    for x, y in zip(a[:5], b):
        for f in ("tokens", "targets", "weight", "mask", "pos"):
            assert torch.equal(getattr(x, f), getattr(y, f)), f
