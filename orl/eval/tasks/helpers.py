"""Helper families for length generalisation ("extrapolation by association"): one per tasks-v7
family, named after it with an `h`, trained at sizes past that family's range, never a headline.

A v7 family is trained only inside its size range, and its `beyond` split asks for larger sizes. What
fails beyond the range is alignment: output element k must read input item k (the k-th digit, record,
statement, letter), and a small model learns that only for the k it has seen. Each helper keeps its
family's alignment and drops the hard part (sums, sorting, variable look-ups, constraints), and is
drawn at sizes that cover the family's `beyond` split. Training a family in range next to its helper
at long sizes lets the family borrow the helper's long alignment (Cai et al. 2025, "Extrapolation by
association"; Awasthi and Gupta 2023, "task hinting"). The family never sees a beyond-size prompt of
its own, but a helper-trained model's `beyond` accuracy measures transfer from the helpers, not
length generalisation alone: `constr7h` uses constr7's opening ("10 of bdg,") with the counts 9-14
its beyond split asks for, and `split7h`'s "N+N" is a valid split7 answer for 2N when 2N keeps N's
width. Reports say when a model was trained with helpers; rollouts and held-out means skip them
(orl.eval.tasks.trained_tasks). `size` counts what the family's `size` counts.

    helper      for       prompt -> answer                                        sizes
    long7h      long7     double:3719= -> 6,14,2,18                                4-32 digits (1-9)
    split7h     split7    dup:1409= -> 1409+1409                                   2-9 digits
    keysort7h   keysort7  pick3:b1,a3,e3= -> ae (the letters keyed 3, in order)    3-12 records, a-l
    prog7h      prog7     calc a=9;c=3+4;b=8-2: -> a=9,c=7,b=6                     2-12 assignments
    constr7h    constr7   10 of bdg, cycle: -> bdgbdgbdgb                          3-14 letters

The index-hinted families (tasks/hinted.py) have their own, in tasks/hint_helpers.py.
"""
from __future__ import annotations

import random
import re

from .base import Task

_STATEMENT = r"[abc]=[0-9](?:[+-][0-9])?"


class Helper(Task):
    """A helper has one answer per prompt: `answer` computes it from the prompt, `check` compares."""
    family: str           # the v7 family it helps
    pattern: re.Pattern   # the prompts it accepts (strict: a malformed prompt is named, never judged)
    why_parallel_is_hard = "where element k starts depends on the widths of the elements before it"

    max_size: int | None = None  # the most items its format can mark (markers, distinct letters), if bounded

    def __init__(self, lo: int, hi: int):
        if not 1 <= lo <= hi or (self.max_size is not None and hi > self.max_size):
            raise ValueError(f"{self.name}: need 1 <= lo <= hi{f' <= {self.max_size}' if self.max_size else ''}, "
                             f"got {lo}, {hi}")
        self.lo, self.hi = lo, hi

    def parse(self, prompt: str) -> re.Match:
        m = self.pattern.fullmatch(prompt)
        if m is None:
            raise ValueError(f"not a {self.name} prompt: {prompt!r}")
        return m

    def answer(self, prompt: str) -> str:
        raise NotImplementedError

    def check(self, prompt: str, output: str) -> bool:
        return output == self.answer(prompt)


class Double(Helper):
    name, family = "long7h", "long7"
    pattern = re.compile(r"double:([1-9]+)=")
    description = "double:<digits>= ; answer is each digit doubled, comma-separated (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        digits = "".join(str(rng.randint(1, 9)) for _ in range(rng.randint(self.lo, self.hi)))
        prompt = f"double:{digits}="
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        return ",".join(str(2 * int(c)) for c in self.parse(prompt)[1])

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1])


class Dup(Helper):
    name, family = "split7h", "split7"
    pattern = re.compile(r"dup:([1-9][0-9]*)=")
    description = "dup:<N>= ; answer is N+N (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        d = rng.randint(self.lo, self.hi)
        n = str(rng.randint(10 ** (d - 1), 10**d - 1))
        prompt = f"dup:{n}="
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        n = self.parse(prompt)[1]
        return f"{n}+{n}"

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1])


PICK_LETTERS = "abcdefghijkl"  # keysort7's letters


class Pick(Helper):
    name, family = "keysort7h", "keysort7"
    pattern = re.compile(r"pick([1-5]):((?:[a-l][1-5],)*[a-l][1-5])=")
    description = "pick<k>:<records letter+key>= ; answer is the letters keyed k, in prompt order (helper, training only)"
    why_parallel_is_hard = "which record the j-th answer letter comes from depends on all earlier matches"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        letters = rng.sample(PICK_LETTERS, rng.randint(self.lo, min(self.hi, len(PICK_LETTERS))))
        keys = [rng.randint(1, 5) for _ in letters]
        k = rng.choice(keys)  # a key that occurs, so the answer is never empty
        prompt = f"pick{k}:" + ",".join(f"{c}{v}" for c, v in zip(letters, keys)) + "="
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        return "".join(r[0] for r in m[2].split(",") if r[1] == m[1])

    def size(self, prompt: str) -> int:
        return self.parse(prompt)[2].count(",") + 1


class Calc(Helper):
    name, family = "prog7h", "prog7"
    pattern = re.compile(rf"calc ((?:{_STATEMENT};)*{_STATEMENT}):")
    description = ("calc <assignments of a digit, d+d or d-d (never negative) to a, b or c>: ; answer echoes each "
                   "value (helper, training only)")
    why_parallel_is_hard = "where statement k's value is written depends on the widths of the earlier ones"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        statements = []
        for _ in range(rng.randint(self.lo, self.hi)):
            x, y = rng.randint(0, 9), rng.randint(0, 9)
            expr = rng.choice((str(x), f"{x}+{y}", f"{max(x, y)}-{min(x, y)}"))
            statements.append(f"{rng.choice('abc')}={expr}")
        prompt = f"calc {';'.join(statements)}:"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        out = []
        for s in self.parse(prompt)[1].split(";"):
            var, expr = s.split("=")
            out.append(f"{var}={eval_literal(expr)}")
        return ",".join(out)

    def size(self, prompt: str) -> int:
        return self.parse(prompt)[1].count("=")


class Cycle(Helper):
    name, family = "constr7h", "constr7"
    pattern = re.compile(r"([1-9][0-9]?) of ([a-z]+), cycle:")  # n <= 99: two digits at most
    description = "<n> of <2-4 letters>, cycle: ; answer repeats the letters in order to length n (helper, training only)"
    why_parallel_is_hard = "the letter at position j depends on j modulo the alphabet's size"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        alphabet = "".join(sorted(rng.sample("abcdefghij", rng.randint(2, 4))))
        prompt = f"{rng.randint(self.lo, self.hi)} of {alphabet}, cycle:"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        n, alphabet = int(m[1]), m[2]
        return "".join(alphabet[j % len(alphabet)] for j in range(n))

    def size(self, prompt: str) -> int:
        return int(self.parse(prompt)[1])


def eval_literal(expr: str) -> int:
    """d, d+d or d-d (the helpers' literal statements)."""
    sign = {"+": 1, "-": -1}.get(expr[1:2], 0)
    return int(expr[0]) + sign * int(expr[2:] or 0)


HELPERS = (Double(4, 32), Dup(2, 9), Pick(3, 12), Calc(2, 12), Cycle(3, 14))  # tiny_base7h's helpers
