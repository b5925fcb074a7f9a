"""Index-hinted versions of two v7 families: items carry unique markers, so the answer's element k
finds the prompt's item k by content rather than by position, and the answer ends where the markers do.

Every v7 base solved at most a few percent of the `beyond` split (sizes past the training range): the
answers kept the training range's length and lost their alignment past it (docs/TRAINING.md). Index
hints (Zhou et al. 2023, "What algorithms can transformers learn? A study in length generalization")
give each item a marker that the answer repeats, which turns "the k-th digit" into a content lookup
that does not depend on k. They change the format, so these are new families with their own names
(`long7x`, `prog7x`), wrapped by `Sized` with the v7 ranges and beyond splits; a result on them is a
result on the hinted format, and is reported next to, never in place of, the v7 family's.

    long7x  cumsum:a3b1c4=            -> a3b4c8            markers: a contiguous run of a-zA-Z at a random
                                                           start, so every marker and successor is trained
    prog7x  echo d=3;e=d+4;f=e-2:     -> d=3,e=7,f=5       prog7's chain, each statement assigning the next
                                                           letter of a random run of a-z (SSA form)

`long7xp` and `prog7xp` ("prefilled") end the prompt with the answer's first marker (`cumsum:a3b1c4=a` ->
`3b4c8`, `echo d=3;e=d+4;f=e-2:d` -> `=3,e=7,f=5`). Why: a model trained on prog7x (session-19 pilot,
docs/TRAINING.md) follows the markers by content - its beyond-range answers end at the right statement -
but finds the first one by its distance from the answer, a distance that beyond-range prompts exceed, and
starts several statements late. With the first marker as the prompt's last character every step of the
answer is a content lookup.
"""
from __future__ import annotations

import itertools
import random
import re
import string

from .base import Task
from .programs import Prog, program_output

MARKERS = string.ascii_lowercase + string.ascii_uppercase
_LONG = re.compile(r"cumsum:((?:[a-zA-Z][1-9])+)=")
_PAIR = re.compile(r"([a-zA-Z])([1-9])")
_LITERAL = r"[a-z]=[0-9](?:[+-][0-9])?"
_DOUBLE = re.compile(r"double:((?:[a-zA-Z][1-9])+)=[a-zA-Z]")
_CALC = re.compile(rf"echo (?:{_LITERAL};)*{_LITERAL}:[a-z]")


def _run(rng: random.Random, alphabet: str, lo: int, hi: int) -> tuple[int, str]:
    n = rng.randint(lo, hi)
    start = rng.randint(0, len(alphabet) - n)
    return n, alphabet[start:start + n]


class LongHints(Task):
    name = "long_hints"
    description = "cumsum:a3b1c4= ; answer a3b4c8: each marker with its running sum"
    why_parallel_is_hard = "each sum depends on all earlier output; its width sets where the next marker sits"

    def __init__(self, lo: int, hi: int, prefill: bool = False):
        if not 1 <= lo <= hi <= len(MARKERS):
            raise ValueError(f"long_hints: need 1 <= lo <= hi <= {len(MARKERS)} markers, got {lo}, {hi}")
        self.lo, self.hi, self.prefill = lo, hi, prefill

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n, marks = _run(rng, MARKERS, self.lo, self.hi)
        prompt = "cumsum:" + "".join(f"{m}{rng.randint(1, 9)}" for m in marks) + "=" + marks[0] * self.prefill
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        body = prompt[:-1] if self.prefill else prompt
        m = _LONG.fullmatch(body)
        if m is None or (self.prefill and prompt[-1] != m[1][0]):
            raise ValueError(f"not a long_hints prompt: {prompt!r}")
        pairs = _PAIR.findall(m[1])
        sums = itertools.accumulate(int(d) for _, d in pairs)
        return "".join(f"{mark}{s}" for (mark, _), s in zip(pairs, sums))[self.prefill:]

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)


class ProgFresh(Task):
    name = "prog_fresh"
    description = "echo d=3;e=d+4;f=e-2: ; every statement assigns a fresh variable (answer d=3,e=7,f=5)"
    why_parallel_is_hard = Prog.why_parallel_is_hard

    def __init__(self, lo: int, hi: int, prefill: bool = False):
        if not 1 <= lo <= hi <= 26:
            raise ValueError(f"prog_fresh: need 1 <= lo <= hi <= 26 variables, got {lo}, {hi}")
        self.lo, self.hi, self.prefill = lo, hi, prefill

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n, names = _run(rng, string.ascii_lowercase, self.lo, self.hi)
        # prog7's chain (each statement reads the previous one's variable, values in 0..99), drawn with one
        # variable and renamed, so the values follow exactly prog7's distribution
        while (program := Prog(n, n, variables="a")._program(rng)) is None:
            pass
        statements = [names[i] + s[1:].replace("a", names[i - 1]) for i, s in enumerate(program[0])]
        prompt = f"echo {';'.join(statements)}:" + names[0] * self.prefill
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        if not self.prefill:
            return program_output(prompt)
        if len(prompt) < 7 or prompt[-1] != prompt[5]:
            raise ValueError(f"not a prog_fresh prompt (prefilled): {prompt!r}")
        return program_output(prompt[:-1])[1:]

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)


class ProgFreshCalc(Task):
    """prog7xp's helper (training only): the same format - fresh variables, the first one closing the prompt -
    with literal statements (a digit, d+d or d-d, never negative) that read no variable, drawn at sizes past
    prog7xp's range. Why: a prog7xp model starts right but stops after about as many statements as it was
    trained on (session-19 pilot); this teaches the format's end at longer sizes without the chain."""
    name = "prog7xph"
    description = "echo d=3;e=4+1;f=9-2:d ; answer =3,e=5,f=7 (helper, training only)"
    why_parallel_is_hard = "where statement k's value is written depends on the widths of the earlier ones"
    family = "prog7xp"

    def __init__(self, lo: int, hi: int):
        if not 1 <= lo <= hi <= 26:
            raise ValueError(f"prog7xph: need 1 <= lo <= hi <= 26 variables, got {lo}, {hi}")
        self.lo, self.hi = lo, hi

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n, names = _run(rng, string.ascii_lowercase, self.lo, self.hi)
        statements = []
        for name in names:
            x, y = rng.randint(0, 9), rng.randint(0, 9)
            statements.append(f"{name}={rng.choice((str(x), f'{x}+{y}', f'{max(x, y)}-{min(x, y)}'))}")
        prompt = f"echo {';'.join(statements)}:{names[0]}"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        if not _CALC.fullmatch(prompt) or prompt[-1] != prompt[5]:
            raise ValueError(f"not a prog7xph prompt: {prompt!r}")
        return program_output(prompt[:-1])[1:]

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)

    def size(self, prompt: str) -> int:
        return prompt.count("=")


class LongHintsDouble(Task):
    """long7xp's helper (training only): the same marker format, first marker closing the prompt, each digit
    doubled instead of summed (no running total), drawn at sizes past long7xp's range."""
    name = "long7xph"
    description = "double:a3b1c4=a ; answer 6b2c8 (helper, training only)"
    why_parallel_is_hard = "where element k starts depends on the widths of the elements before it"
    family = "long7xp"

    def __init__(self, lo: int, hi: int):
        if not 1 <= lo <= hi <= len(MARKERS):
            raise ValueError(f"long7xph: need 1 <= lo <= hi <= {len(MARKERS)} markers, got {lo}, {hi}")
        self.lo, self.hi = lo, hi

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n, marks = _run(rng, MARKERS, self.lo, self.hi)
        prompt = "double:" + "".join(f"{m}{rng.randint(1, 9)}" for m in marks) + "=" + marks[0]
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = _DOUBLE.fullmatch(prompt)
        if m is None or prompt[-1] != m[1][0]:
            raise ValueError(f"not a long7xph prompt: {prompt!r}")
        return "".join(f"{mark}{2 * int(d)}" for mark, d in _PAIR.findall(m[1]))[1:]

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)

    def size(self, prompt: str) -> int:
        return len(_PAIR.findall(prompt))
