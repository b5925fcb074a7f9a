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
(orl.train.rollout.trained_tasks). `size` counts what the family's `size` counts.

    helper      for       prompt -> answer                                        sizes
    long7h      long7     double:3719= -> 6,14,2,18                                4-32 digits (1-9)
    split7h     split7    dup:1409= -> 1409+1409                                   2-9 digits
    keysort7h   keysort7  pick3:b1,a3,e3= -> ae (the letters keyed 3, in order)    3-12 records, a-l
    prog7h      prog7     calc a=9;c=3+4;b=8-2: -> a=9,c=7,b=6                     2-12 assignments
    constr7h    constr7   10 of bdg, cycle: -> bdgbdgbdgb                          3-14 letters

The index-hinted families (tasks/hinted.py) have their own (`HINT_HELPERS`):

    prog7xph    prog7xp   echo d=3;e=4+1:d -> =3,e=5                                2-14 assignments
    long7xph    long7xp   double:a3b1=a -> 6b2                                     4-32 digits
    long7xpo    long7xp   cumsum+137:a3b1=a -> 140b141 (values, not lengths)       2-12 digits, offset 0-199
"""
from __future__ import annotations

import itertools
import random
import re
import string

from .base import Task
from .hinted import MARKERS, marker_run

_STATEMENT = r"[abc]=[0-9](?:[+-][0-9])?"


class Helper(Task):
    """A helper has one answer per prompt: `answer` computes it from the prompt, `check` compares."""
    family: str           # the v7 family it helps
    pattern: re.Pattern   # the prompts it accepts (strict: a malformed prompt is named, never judged)
    why_parallel_is_hard = "where element k starts depends on the widths of the elements before it"

    def __init__(self, lo: int, hi: int):
        if not 1 <= lo <= hi:
            raise ValueError(f"{self.name}: need 1 <= lo <= hi, got {lo}, {hi}")
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


_LITERAL = r"[a-z]=[0-9](?:[+-][0-9])?"


class FreshCalc(Helper):
    """prog7xp's helper (tasks/hinted.py): prog7xp's format - fresh consecutive variables, the first closing
    the prompt - with literal statements that read no variable. A prog7xp model starts right but stops after
    about as many statements as it was trained on (session-19 pilot); this trains the format's end at longer
    sizes without the chain."""
    name, family = "prog7xph", "prog7xp"
    pattern = re.compile(rf"echo ((?:{_LITERAL};)*{_LITERAL}):([a-z])")
    description = "echo d=3;e=4+1;f=9-2:d ; answer =3,e=5,f=7 (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        statements = []
        for name in marker_run(rng, string.ascii_lowercase, self.lo, self.hi)[1]:
            x, y = rng.randint(0, 9), rng.randint(0, 9)
            statements.append(f"{name}={rng.choice((str(x), f'{x}+{y}', f'{max(x, y)}-{min(x, y)}'))}")
        prompt = f"echo {';'.join(statements)}:{statements[0][0]}"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        statements = m[1].split(";")
        targets = [st[0] for st in statements]
        if m[2] != targets[0] or any(ord(b) != ord(a) + 1 for a, b in zip(targets, targets[1:])):
            raise ValueError(f"not a {self.name} prompt (consecutive variables, the first closing it): {prompt!r}")
        return ",".join(f"{st[0]}={eval_literal(st[2:])}" for st in statements)[1:]

    def size(self, prompt: str) -> int:
        return self.parse(prompt)[1].count("=")


def eval_literal(expr: str) -> int:
    """d, d+d or d-d (the helpers' literal statements)."""
    sign = {"+": 1, "-": -1}.get(expr[1:2], 0)
    return int(expr[0]) + sign * int(expr[2:] or 0)


class MarkedDouble(Helper):
    """long7xp's helper (tasks/hinted.py): long7xp's marker format, the first marker closing the prompt, each
    digit doubled instead of summed (no running total)."""
    name, family = "long7xph", "long7xp"
    pattern = re.compile(r"double:((?:[a-zA-Z][1-9])+)=([a-zA-Z])")
    description = "double:a3b1c4=a ; answer 6b2c8 (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks = marker_run(rng, MARKERS, self.lo, self.hi)[1]
        prompt = "double:" + "".join(f"{c}{rng.randint(1, 9)}" for c in marks) + "=" + marks[0]
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        if m[2] != m[1][0]:
            raise ValueError(f"not a {self.name} prompt (the first marker closes it): {prompt!r}")
        return "".join(f"{c}{2 * int(d)}" for c, d in re.findall(r"(.)(.)", m[1]))[1:]

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1]) // 2


class OffsetSum(Helper):
    """long7xp's value helper (tasks/hinted.py): long7xp's marker format at 2-12 digits, with the running sum
    starting from an offset named in the prompt (`cumsum+137:`). long7xp's beyond split (21-28 digits) needs
    sums of 100-250, which its range (4-20 digits) rarely reaches; this trains those values at short lengths,
    never at a beyond size. Unlike the other helpers it keeps the family's hard part (the running sum)."""
    name, family = "long7xpo", "long7xp"
    pattern = re.compile(r"cumsum\+([0-9]{1,3}):((?:[a-zA-Z][1-9])+)=([a-zA-Z])")
    description = "cumsum+137:a3b1c4=a ; answer 140b141c145 (helper, training only)"
    OFFSETS = (0, 199)

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks = marker_run(rng, MARKERS, self.lo, self.hi)[1]
        prompt = (f"cumsum+{rng.randint(*self.OFFSETS)}:" + "".join(f"{c}{rng.randint(1, 9)}" for c in marks)
                  + "=" + marks[0])
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        lo, hi = self.OFFSETS
        if m[3] != m[2][0] or str(int(m[1])) != m[1] or not lo <= int(m[1]) <= hi or m[2][::2] not in MARKERS:
            raise ValueError(f"not a {self.name} prompt (an offset {lo}-{hi} without leading zeros, a run of "
                             f"consecutive markers, the first closing it): {prompt!r}")
        pairs = re.findall(r"(.)(.)", m[2])
        sums = itertools.accumulate((int(d) for _, d in pairs), initial=int(m[1]))
        return "".join(f"{c}{s}" for (c, _), s in zip(pairs, itertools.islice(sums, 1, None)))[1:]

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[2]) // 2


HELPERS = (Double(4, 32), Dup(2, 9), Pick(3, 12), Calc(2, 12), Cycle(3, 14))  # tiny_base7h's helpers
HINT_HELPERS = (FreshCalc(2, 14), MarkedDouble(4, 32), OffsetSum(2, 12))  # for the index-hinted families (tasks/hinted.py)
HELPER_NAMES = frozenset(h.name for h in HELPERS + HINT_HELPERS)
