"""The hinted families' held-out split under other marker runs. split7xp and constr7xp drop the markers in
`canonical`, so a held-out problem is held out under every marker run; long7x, long7xp, prog7x and prog7xp hash the
prompt with its markers, so most of their held-out problems are train prompts under a shifted run (with the shipped
tiny7 base's budget, 48,000 train draws each, 22 of the first 100 held-out prog7xp prompts and 6 of long7xp's were
trained as the same problem under other markers). Not fixed: `canonical` decides the split, so a fix would move
prompts between train and held-out and contaminate the held-out split of every checkpoint trained on these names;
a fix needs new family names. The xfail is strict, so a change to the split shows here."""
from __future__ import annotations

import string

import pytest

from orl.eval.tasks import TASKS
from orl.eval.tasks.hinted import MARKERS


OPENINGS = ("cumsum:", "echo ", "?+?=", "")  # fixed text before the markers (constr7xp's rest is lower case)


def shifted(prompt: str, alphabet: str, letters: set[str]) -> str | None:
    """The prompt with every marker moved one step along `alphabet` (None when the run ends at its end)."""
    if alphabet.index(max(letters, key=alphabet.index)) == len(alphabet) - 1:
        return None
    head = next(o for o in OPENINGS if prompt.startswith(o))
    return head + "".join(alphabet[alphabet.index(c) + 1] if c in letters else c for c in prompt[len(head):])


def markers(name: str, prompt: str) -> str:
    """The marker characters of a prompt (the rest is fixed text)."""
    if name.startswith("long"):
        return "".join(prompt[len("cumsum:"):].split("=")[0][::2])
    if name.startswith("prog"):
        return "".join(s[0] for s in prompt[len("echo "):prompt.rindex(":")].split(";"))
    if name.startswith("split"):
        return prompt[len("?+?="):prompt.index(":")][::2]
    return prompt.split(" ", 1)[0]  # constr7xp: the slot run


def heldout_moved_to_train(name: str, n: int = 200) -> int:
    task = TASKS[name]
    alphabet = string.ascii_lowercase if name.startswith("prog") else (
        string.ascii_uppercase if name.startswith("constr") else MARKERS)
    moved = 0
    for i in range(n):
        p = task.sample("heldout", i).prompt
        q = shifted(p, alphabet, set(markers(name, p)))
        if q is not None:
            getattr(task.inner, "answer", getattr(task.inner, "parse", None))(q)  # a prompt of the family, or raises
            moved += task.split_of(q) == "train"
    return moved


@pytest.mark.parametrize("name", ["split7xp", "constr7xp"])
def test_canonical_families_hold_a_problem_out_under_every_marker_run(name):
    assert heldout_moved_to_train(name) == 0


@pytest.mark.xfail(strict=True, reason="long7x/long7xp/prog7x/prog7xp split with their markers (not fixed: it would "
                                       "change their splits)")
@pytest.mark.parametrize("name", ["long7x", "long7xp", "prog7x", "prog7xp"])
def test_hinted_single_answer_families_hold_a_problem_out_under_every_marker_run(name):
    assert heldout_moved_to_train(name) == 0
