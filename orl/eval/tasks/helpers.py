"""Helper families for length generalisation ("extrapolation by association"): one per tasks-v7
family, trained at sizes past that family's range, never evaluated as a headline.

A v7 family is trained only inside its size range, and its `beyond` split asks for larger sizes. What
fails beyond the range is alignment: output element k must read input item k (the k-th digit, record,
statement, letter), and a small model learns that only for the k it has seen. Each helper here keeps
its family's alignment and drops the hard part (sums, sorting, variable look-ups, constraints), and is
drawn at sizes that cover the family's `beyond` split. Training a family in range next to its helper
at long sizes lets the family borrow the helper's long alignment (Cai et al. 2025, "Extrapolation by
association"; Awasthi and Gupta 2023, "task hinting"). The family itself never sees a beyond size, so
its `beyond` accuracy still measures generalisation past its own range; what it may use is written
here, and reports say when a model was trained with helpers. `size` counts what the family's `size`
counts (digits, records, assignments, letters).

    helper   for        prompt -> answer                                   sizes
    double   long7      double:3719= -> 6,14,2,18                           4-32 digits (1-9)
    dup      split7     dup:1409= -> 1409+1409                              2-9 digits
    pick     keysort7   pick3:b1,a3,e3= -> ae (the letters keyed 3, in order) 3-12 records, a-l
    calc     prog7      calc a=9;c=3+4;b=8-2: -> a=9,c=7,b=6                2-12 assignments
    cycle    constr7    10 of bdg, cycle: -> bdgbdgbdgb                      3-14 letters
"""
from __future__ import annotations

import random
import re

from .base import Task


class Double(Task):
    name = "double"
    description = "double:<4-32 digits>= ; answer is each digit doubled, comma-separated"
    why_parallel_is_hard = "where element k starts depends on the widths of the elements before it"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        digits = "".join(str(rng.randint(1, 9)) for _ in range(rng.randint(4, 32)))
        prompt = f"double:{digits}="
        return prompt, _double(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return output == _double(prompt)

    def size(self, prompt: str) -> int:
        return len(prompt) - len("double:=")


def _double(prompt: str) -> str:
    m = re.fullmatch(r"double:([1-9]+)=", prompt)
    if m is None:
        raise ValueError(f"not a double prompt: {prompt!r}")
    return ",".join(str(2 * int(c)) for c in m[1])


class Dup(Task):
    name = "dup"
    description = "dup:<N, 2-9 digits>= ; answer is N+N"
    why_parallel_is_hard = "each digit of the second copy sits one number's width after the first's"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        d = rng.randint(2, 9)
        n = str(rng.randint(10 ** (d - 1), 10**d - 1))
        return f"dup:{n}=", f"{n}+{n}"

    def check(self, prompt: str, output: str) -> bool:
        m = re.fullmatch(r"dup:([0-9]+)=", prompt)
        if m is None:
            raise ValueError(f"not a dup prompt: {prompt!r}")
        return output == f"{m[1]}+{m[1]}"

    def size(self, prompt: str) -> int:
        return len(prompt) - len("dup:=")


PICK_LETTERS = "abcdefghijkl"  # keysort7's letters


class Pick(Task):
    name = "pick"
    description = "pick<k>:<3-12 records letter+key>= ; answer is the letters keyed k, in prompt order"
    why_parallel_is_hard = "which record the j-th answer letter comes from depends on all earlier matches"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        letters = rng.sample(PICK_LETTERS, rng.randint(3, 12))
        keys = [rng.randint(1, 5) for _ in letters]
        k = rng.choice(keys)  # a key that occurs, so the answer is never empty
        prompt = f"pick{k}:" + ",".join(f"{c}{v}" for c, v in zip(letters, keys)) + "="
        return prompt, _pick(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return output == _pick(prompt)

    def size(self, prompt: str) -> int:
        return prompt.count(",") + 1


def _pick(prompt: str) -> str:
    m = re.fullmatch(r"pick([1-5]):((?:[a-l][1-5],)*[a-l][1-5])=", prompt)
    if m is None:
        raise ValueError(f"not a pick prompt: {prompt!r}")
    return "".join(r[0] for r in m[2].split(",") if r[1] == m[1])


class Calc(Task):
    name = "calc"
    description = "calc <2-12 assignments of a digit, d+d or d-d to a, b or c>: ; answer echoes each value"
    why_parallel_is_hard = "where statement k's value is written depends on the widths of the earlier ones"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        statements = []
        for _ in range(rng.randint(2, 12)):
            x, y = rng.randint(0, 9), rng.randint(0, 9)
            expr = rng.choice((str(x), f"{x}+{y}", f"{max(x, y)}-{min(x, y)}"))
            statements.append(f"{rng.choice('abc')}={expr}")
        prompt = f"calc {';'.join(statements)}:"
        return prompt, _calc(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return output == _calc(prompt)

    def size(self, prompt: str) -> int:
        return prompt.count("=")


def _calc(prompt: str) -> str:
    m = re.fullmatch(r"calc ((?:[abc]=[0-9](?:[+-][0-9])?;)*[abc]=[0-9](?:[+-][0-9])?):", prompt)
    if m is None:
        raise ValueError(f"not a calc prompt: {prompt!r}")
    out = []
    for s in m[1].split(";"):
        var, expr = s.split("=")
        value = int(expr[0]) + (int(expr[2]) if expr[1:2] == "+" else -int(expr[2]) if expr[1:2] == "-" else 0)
        out.append(f"{var}={value}")
    return ",".join(out)


class Cycle(Task):
    name = "cycle"
    description = "<n, 3-14> of <2-4 letters>, cycle: ; answer repeats the letters in order to length n"
    why_parallel_is_hard = "the letter at position j depends on j modulo the alphabet's size"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        alphabet = "".join(sorted(rng.sample("abcdefghij", rng.randint(2, 4))))
        prompt = f"{rng.randint(3, 14)} of {alphabet}, cycle:"
        return prompt, _cycle(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return output == _cycle(prompt)

    def size(self, prompt: str) -> int:
        return int(prompt.split()[0])


def _cycle(prompt: str) -> str:
    m = re.fullmatch(r"([0-9]+) of ([a-z]+), cycle:", prompt)
    if m is None:
        raise ValueError(f"not a cycle prompt: {prompt!r}")
    n, alphabet = int(m[1]), m[2]
    return "".join(alphabet[j % len(alphabet)] for j in range(n))


HELPERS = (Double(), Dup(), Pick(), Calc(), Cycle())
