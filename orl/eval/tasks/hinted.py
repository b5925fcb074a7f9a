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
# prog_fresh: a literal first statement, then each one assigns the next letter from the previous variable
_FRESH = re.compile(r"echo ([a-z]=[0-9](?:;[a-z]=(?:[a-z][+-][0-9]|[0-9][+-][a-z]))*):")


def marker_run(rng: random.Random, alphabet: str, lo: int, hi: int) -> tuple[int, str]:
    """n drawn from [lo, hi], then n consecutive markers of `alphabet` at a random start."""
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
        n, marks = marker_run(rng, MARKERS, self.lo, self.hi)
        prompt = "cumsum:" + "".join(f"{m}{rng.randint(1, 9)}" for m in marks) + "=" + (marks[0] if self.prefill else "")
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        body = prompt[:-1] if self.prefill else prompt
        m = _LONG.fullmatch(body)
        if m is None or (self.prefill and prompt[-1] != m[1][0]):
            raise ValueError(f"not a long_hints prompt: {prompt!r}")
        pairs = _PAIR.findall(m[1])
        sums = itertools.accumulate(int(d) for _, d in pairs)
        answer = "".join(f"{mark}{s}" for (mark, _), s in zip(pairs, sums))
        return answer[1:] if self.prefill else answer

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
        n, names = marker_run(rng, string.ascii_lowercase, self.lo, self.hi)
        # prog7's chain (each statement reads the previous one's variable, values in 0..99), drawn with one
        # variable and renamed, so that at each size the values follow prog7's distribution
        while (program := Prog(n, n, variables="a")._program(rng)) is None:
            pass
        statements = [names[i] + s[1:].replace("a", names[i - 1]) for i, s in enumerate(program[0])]
        prompt = f"echo {';'.join(statements)}:" + (names[0] if self.prefill else "")
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        body = prompt[:-1] if self.prefill else prompt
        m = _FRESH.fullmatch(body)
        statements = m[1].split(";") if m else []
        targets = [st[0] for st in statements]
        fresh = all(ord(b) == ord(a) + 1 and set(re.findall("[a-z]", st[2:])) == {a}
                    for a, b, st in zip(targets, targets[1:], statements[1:]))
        if m is None or not fresh or (self.prefill and prompt[-1] != targets[0]):
            raise ValueError(f"not a prog_fresh prompt (fresh consecutive variables, each read by the next "
                             f"statement{', the first closing the prompt' if self.prefill else ''}): {prompt!r}")
        output = program_output(body)
        return output[1:] if self.prefill else output

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)
