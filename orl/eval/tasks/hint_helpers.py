"""Helpers of the index-hinted families (tasks/hinted.py; `Helper` and the idea: tasks/helpers.py).
Training only, never a headline; rollouts and held-out means skip them (`HELPER_NAMES`).

    helper      for       prompt -> answer                                        sizes
    prog7xph    prog7xp   echo d=3;e=4+1:d -> =3,e=5                                2-14 assignments
    long7xph    long7xp   double:a3b1=a -> 6b2                                     4-32 digits
    long7xpo    long7xp   cumsum+137:a3b1=a -> 140b141 (values, not lengths)       2-12 digits, offset 0-199
    long7xpf    long7xp   cumsum:a3b1   =a -> 3b4 (distances, not lengths)         4-20 digits, 0-40 spaces
    prog7xpf    prog7xp   echo d=3;e=d+4   :d -> =3,e=7 (distances)                 2-7 assignments, 0-40 spaces
"""
from __future__ import annotations

import itertools
import random
import re
import string

from .base import split_of as split_by_hash
from .helpers import HELPERS, Helper, eval_literal
from .hint_choice_helpers import CHOICE_HELPERS
from .hinted import MARKERS, ProgFresh, marker_run

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

    def split_of(self, prompt: str) -> str:
        # at offset 0 a prompt asks for long7xp's answer: split it as long7xp would, so that no training row
        # is one of long7xp's held-out prompts
        m = self.pattern.fullmatch(prompt)
        if m and m[1] == "0":
            return split_by_hash(self.family, f"cumsum:{m[2]}={m[3]}")
        return super().split_of(prompt)


class FillerSum(Helper):
    """long7xp's distance helper: long7xp itself, in its range (4-20 digits), with 0-40 spaces before the `=`.
    Past the range long7xp's steps fail from element 21 on even where the sum stays small (session 20,
    docs/TRAINING.md): element k is found partly by its distance from item k, and that distance grows with
    the prompt. The spaces move every item away from the answer by a random amount without adding items or
    larger sums, so only a lookup by the marker stays right."""
    name, family = "long7xpf", "long7xp"
    pattern = re.compile(r"cumsum:((?:[a-zA-Z][1-9])+)( *)=([a-zA-Z])")
    description = "cumsum:a3b1c4   =a ; answer 3b4c8 (helper, training only)"
    FILLER = 40

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks = marker_run(rng, MARKERS, self.lo, self.hi)[1]
        prompt = ("cumsum:" + "".join(f"{c}{rng.randint(1, 9)}" for c in marks) + " " * rng.randint(0, self.FILLER)
                  + "=" + marks[0])
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        if m[3] != m[1][0] or m[1][::2] not in MARKERS or len(m[2]) > self.FILLER:
            raise ValueError(f"not a {self.name} prompt (a run of consecutive markers, at most {self.FILLER} "
                             f"spaces, the first marker closing it): {prompt!r}")
        pairs = re.findall(r"(.)(.)", m[1])
        sums = itertools.accumulate(int(d) for _, d in pairs)
        return "".join(f"{c}{s}" for (c, _), s in zip(pairs, sums))[1:]

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1]) // 2

    def split_of(self, prompt: str) -> str:
        # without its spaces a prompt is long7xp's, with the same answer: split it as long7xp would, so that no
        # training row is one of long7xp's held-out prompts
        return split_by_hash(self.family, re.sub(r" +=", "=", prompt))


class FillerProg(Helper):
    """prog7xp's distance helper: prog7xp itself, in its range (2-7 assignments), with 0-40 spaces before the
    `:`. Past the range prog7xp's first statements already fail more often (hint2, hint3: statement 2 right in
    71-75% of beyond answers against 90-97% in range; `length_table.py --first-errors`): a beyond prompt puts its
    early statements farther from the answer than any trained prompt does, and the chain is read partly by
    that distance. The spaces vary it in range without more statements, as long7xpf does for long7xp."""
    name, family = "prog7xpf", "prog7xp"
    pattern = re.compile(r"echo ([^:]*?)( *):([a-z])")
    description = "echo d=3;e=d+4   :d ; answer =3,e=7 (helper, training only)"
    FILLER = 40

    def __init__(self, lo: int, hi: int):
        super().__init__(lo, hi)
        self.program = ProgFresh(lo, hi, prefill=True)

    def generate(self, rng: random.Random) -> tuple[str, str]:
        plain, _ = self.program.generate(rng)
        head, first = plain[:-2], plain[-1]  # "echo ...", then ":" and the first variable
        prompt = f"{head}{' ' * rng.randint(0, self.FILLER)}:{first}"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        if len(m[2]) > self.FILLER:
            raise ValueError(f"not a {self.name} prompt (at most {self.FILLER} spaces before the ':'): {prompt!r}")
        try:
            return self.program.answer(self.plain(prompt))
        except ValueError:
            raise ValueError(f"not a {self.name} prompt (prog7xp's, with spaces before the ':'): {prompt!r}") from None

    def plain(self, prompt: str) -> str:
        return re.sub(r" +:", ":", prompt)

    def size(self, prompt: str) -> int:
        self.answer(prompt)  # a malformed prompt is named, never measured
        return self.parse(prompt)[1].count("=")

    def split_of(self, prompt: str) -> str:
        # without its spaces a prompt is prog7xp's, with the same answer: split it as prog7xp would
        return split_by_hash(self.family, self.plain(prompt))


HINT_HELPERS = (FreshCalc(2, 14), MarkedDouble(4, 32), OffsetSum(2, 12), FillerSum(4, 20), FillerProg(2, 7))
HELPER_NAMES = frozenset(h.name for h in HELPERS + HINT_HELPERS + CHOICE_HELPERS)
