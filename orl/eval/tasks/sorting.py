"""`sort`: sort a short list, in two variants; the default is `keyed` (tasks v6).

    keyed:   "sort:c3,a1,b3,d2="  -> "adcb" or "adbc"
             5-8 records, each a distinct letter from a-j and a key 1-5; the answer is the letters
             ordered by key, records with equal keys in any order (sorting is not required to be
             stable). The verifier checks that the answer is a permutation of the letters whose keys
             never decrease. The reference orders ties at random, so the training target is uniform
             over the valid answers.
    numbers: "sort:42,7,91,7,15=" -> "7,7,15,42,91"
             3-5 numbers 0-99 with mixed widths (each draws its width first, then its value); the
             answer is the same multiset in ascending order, exactly one valid string (tasks v4-v5).

Why `keyed` is the default (tasks v6): the v5 base committed a `numbers` answer in ~1.25 forwards per
block at threshold 0.9 (TPF 9.02 of a ceiling of 10.45): once learned, an order statistic is computed
for every slot at once. With ties, which letter of a tie group goes first is a free choice, so a
calibrated model is unsure of those slots until one of the group is written (a perfectly calibrated
model's TPF at 0.9 is 1.43 of a ceiling of 7.5, runs/v6 oracle) while the rest is still a sort.

Why parallel decoding is non-trivial: in `keyed`, the slots of a tie group each put ~1/k on every
letter of the group; committing two of them in one step can write the same letter twice and lose
another, and a slot's key group depends on how many records have smaller keys (a whole-input count).
In `numbers`, the number at slot i is the i-th order statistic and its character position depends on
the widths of the smaller numbers.
"""
from __future__ import annotations

import random
import re

from .base import Task, draw_number

_NUMBERS = re.compile(r"sort:([0-9]+(?:,[0-9]+)*)=")
_KEYED = re.compile(r"sort:([a-z][0-9](?:,[a-z][0-9])*)=")
LETTERS = "abcdefghij"
VARIANTS = ("keyed", "numbers")


class Sort(Task):
    name = "sort"
    description = "sort:<5-8 letter-key records>= ; answer is the letters ordered by key, ties in any order"
    why_parallel_is_hard = ("tie groups leave a free choice per slot, so slots committed together can repeat a "
                            "letter; each slot's key group depends on a count over the whole input")

    def __init__(self, min_len: int | None = None, max_len: int | None = None, max_digits: int = 2,
                 max_key: int = 5, variants: tuple[str, ...] = ("keyed",)):
        if not variants or set(variants) - set(VARIANTS):
            raise ValueError(f"variants must be a non-empty subset of {VARIANTS}")
        # The default lengths differ per variant: 5-8 records make ties common at keys 1-5.
        keyed_only = variants == ("keyed",)
        min_len = min_len if min_len is not None else (5 if keyed_only else 3)
        max_len = max_len if max_len is not None else (8 if keyed_only else 5)
        if not 1 <= min_len <= max_len or max_digits < 1 or not 1 <= max_key <= 9:
            raise ValueError("need 1 <= min_len <= max_len, max_digits >= 1 and 1 <= max_key <= 9")
        if "keyed" in variants and max_len > len(LETTERS):
            raise ValueError(f"keyed records use distinct letters from {LETTERS!r}: max_len <= {len(LETTERS)}")
        self.min_len, self.max_len, self.max_digits, self.max_key, self.variants = min_len, max_len, max_digits, max_key, variants

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n = rng.randint(self.min_len, self.max_len)
        if rng.choice(self.variants) == "keyed":
            records = [(letter, rng.randint(1, self.max_key)) for letter in rng.sample(LETTERS, n)]
            # Sorting on (key, random) orders each tie group uniformly at random.
            ordered = sorted(records, key=lambda r: (r[1], rng.random()))
            return f"sort:{','.join(f'{c}{k}' for c, k in records)}=", "".join(c for c, _ in ordered)
        items = [draw_number(rng, 1, self.max_digits) for _ in range(n)]
        return f"sort:{','.join(map(str, items))}=", ",".join(map(str, sorted(items)))

    def canonical(self, prompt: str) -> str:
        # Every ordering of the same records has the same answers; hold them out together.
        if _KEYED.fullmatch(prompt):
            return f"sort:{','.join(sorted(prompt[5:-1].split(',')))}="
        return f"sort:{','.join(map(str, sorted(_items(prompt))))}="

    def check(self, prompt: str, output: str) -> bool:
        if _KEYED.fullmatch(prompt):
            keys = {r[0]: int(r[1]) for r in prompt[5:-1].split(",")}
            return (sorted(output) == sorted(keys)
                    and all(keys[a] <= keys[b] for a, b in zip(output, output[1:])))
        return output == ",".join(map(str, sorted(_items(prompt))))


def _items(prompt: str) -> list[int]:
    m = _NUMBERS.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a sort prompt: {prompt!r}")
    return [int(x) for x in m[1].split(",")]
