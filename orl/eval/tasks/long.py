"""`long`: running sums of a digit string; the answer spans three blocks of 16 characters.

Format: prompt "cumsum:" + 15 digits (1-9, no separators) + "=", answer = the prefix sums in decimal
joined by ',':
    cumsum:314159265358979=  -> "3,4,8,9,14,23,25,31,36,39,44,52,61,68,77"
Digits are 1-9 so that with the default 15 digits the answer is always 35-47 characters (all ones give
1..15, the shortest case): with EOS it fills three 16-token blocks. The verifier recomputes the sums.

Why parallel decoding is non-trivial: the k-th sum depends on every earlier digit, i.e. on everything
already written, so a block can only be right if the previous block's last sum is; and WHERE the k-th
sum sits in the string depends on the widths of all earlier sums (1, 2 or 3 digits), so a position
cannot know which sum, or which digit of it, it holds without its left context. Within a sum, tens and
units digits must agree on the carry from adding the next digit.
"""
from __future__ import annotations

import itertools
import random
import re

from .base import Task

_PROMPT = re.compile(r"cumsum:([0-9]+)=")


class Long(Task):
    name = "long"
    description = "cumsum:<15 digits>= ; answer is the comma-separated running sums (35-47 chars)"
    why_parallel_is_hard = ("each sum depends on all earlier output, and each sum's position in the string "
                            "depends on the widths of all earlier sums")

    def __init__(self, n_digits: int = 15, max_digits: int | None = None):
        """n_digits digits, or a count drawn uniformly from [n_digits, max_digits] when max_digits is given."""
        max_digits = n_digits if max_digits is None else max_digits
        if not 1 <= n_digits <= max_digits:
            raise ValueError(f"need 1 <= n_digits <= max_digits, got {n_digits}, {max_digits}")
        self.n_digits, self.max_digits = n_digits, max_digits

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n = self.n_digits if self.max_digits == self.n_digits else rng.randint(self.n_digits, self.max_digits)
        digits = "".join(str(rng.randint(1, 9)) for _ in range(n))
        prompt = f"cumsum:{digits}="
        return prompt, _answer(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return output == _answer(prompt)


def _answer(prompt: str) -> str:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a cumsum prompt: {prompt!r}")
    return ",".join(map(str, itertools.accumulate(int(c) for c in m[1])))
