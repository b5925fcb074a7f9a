"""`sort`: sort a short list of numbers 0-99 written with their natural widths.

Format: prompt "sort:" + numbers joined by ',' + "=", answer = the same multiset in ascending
numerical order joined by ',':
    sort:42,7,91,7,15=  -> "7,7,15,42,91"
3-5 numbers; each draws its width (1 or 2 digits) first and then its value, so that one-digit numbers
are not swamped 9:1 by two-digit ones. Repeats are allowed. The verifier sorts the prompt's numbers
itself and requires that exact string.

Why mixed widths: with single characters, answer position 2i always holds the i-th order statistic,
so a trained model commits a whole answer in one or two forwards: nothing depends on anything. With
widths 1-2, WHERE the i-th number sits depends on the widths of all smaller numbers. That makes sort
harder to learn but barely harder to decode in parallel (a trained base still commits an answer in
~1.3 steps per block at threshold 0.9), which is why SUITE has `keysort` instead
(docs/history/CODE-NOTES.md).

Why parallel decoding is non-trivial: the number at answer slot i is the i-th order statistic, a
function of the whole input; the answer must be a permutation of the input; and which slot (and which
digit of it) a character position holds depends on the widths of the numbers before it. Positions
committed independently can pick the same number twice, drop one, or split a two-digit number across
a comma; only positions decoded with sight of their left context stay consistent.
"""
from __future__ import annotations

import random
import re

from .base import Task, draw_number

_PROMPT = re.compile(r"sort:([0-9]+(?:,[0-9]+)*)=")


class Sort(Task):
    name = "sort"
    description = "sort:<3-5 numbers 0-99, comma separated>= ; answer is the numerically sorted list"
    why_parallel_is_hard = ("each output slot is an order statistic of the whole input, the output must be a "
                            "permutation of it, and a slot's character position depends on earlier widths")

    def __init__(self, min_len: int = 3, max_len: int = 5, max_digits: int = 2):
        if not 1 <= min_len <= max_len or max_digits < 1:
            raise ValueError("need 1 <= min_len <= max_len and max_digits >= 1")
        self.min_len, self.max_len, self.max_digits = min_len, max_len, max_digits

    def generate(self, rng: random.Random) -> tuple[str, str]:
        items = [draw_number(rng, 1, self.max_digits) for _ in range(rng.randint(self.min_len, self.max_len))]
        return f"sort:{','.join(map(str, items))}=", ",".join(map(str, sorted(items)))

    def canonical(self, prompt: str) -> str:
        # Every ordering of the same multiset has the same answer; hold them out together.
        return f"sort:{','.join(map(str, sorted(_items(prompt))))}="

    def check(self, prompt: str, output: str) -> bool:
        return output == ",".join(map(str, sorted(_items(prompt))))


def _items(prompt: str) -> list[int]:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a sort prompt: {prompt!r}")
    return [int(x) for x in m[1].split(",")]
