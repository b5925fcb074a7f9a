"""`keysort`: order labelled records by key, ties in any order; many valid answers.

Format: prompt "sort:" + 5-8 records (a distinct letter from a-j and a key 1-5) joined by ',' + "=",
answer = the letters ordered by key, records with equal keys in any order (the sort need not be
stable):
    sort:c3,a1,b3,d2=  -> "adcb" or "adbc"
The verifier checks that the answer is a permutation of the letters whose keys never decrease. The
reference orders each tie group at random, so the training target is uniform over the valid answers;
with 5-8 records over 5 keys nearly every list has a tie.

Why it exists: a trained base commits a `sort` answer (numbers, one valid answer) in ~1.25 forwards
per block at threshold 0.9 (TPF 9.02 of a ceiling of 10.45): once learned, an order statistic is
computed for every slot at once. With ties, which letter of a tie group goes first is a
free choice, so a calibrated model is unsure of those slots until one of the group is written (a
perfectly calibrated model's TPF at 0.9 is 1.59 of a ceiling of 7.42 on the prompts of
`orl eval --limit 40`, benchmarks/oracle_tpf.py), while the rest is still a sort.

Why parallel decoding is non-trivial: the slots of a tie group each put ~1/k on every letter of the
group, so two of them committed in one step can write the same letter twice and lose another; and
which key group a slot belongs to depends on how many records have smaller keys, a count over the
whole input.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task

_PROMPT = re.compile(r"sort:([a-z][0-9](?:,[a-z][0-9])*)=")
LETTERS = "abcdefghij"
KEYSORT7_LETTERS = "abcdefghijkl"  # keysort7's 12 letters, so that `beyond` can have up to 12 records


class KeySort(Task):
    name = "keysort"
    description = "sort:<5-8 letter-key records>= ; answer is the letters ordered by key, ties in any order"
    why_parallel_is_hard = ("tie groups leave a free choice per slot, so slots committed together can repeat a "
                            "letter; each slot's key group depends on a count over the whole input")

    def __init__(self, min_len: int = 5, max_len: int = 8, max_key: int = 5, letters: str = LETTERS):
        if len(set(letters)) != len(letters) or set(letters) - set(string.ascii_lowercase):
            raise ValueError(f"letters must be distinct lowercase letters, got {letters!r}")
        if not 1 <= min_len <= max_len <= len(letters) or not 1 <= max_key <= 9:
            raise ValueError(f"need 1 <= min_len <= max_len <= {len(letters)} (the letters) and 1 <= max_key <= 9")
        self.min_len, self.max_len, self.max_key, self.letters = min_len, max_len, max_key, letters

    def generate(self, rng: random.Random) -> tuple[str, str]:
        letters = rng.sample(self.letters, rng.randint(self.min_len, self.max_len))
        records = [(c, rng.randint(1, self.max_key)) for c in letters]
        # Sorting on (key, random) orders each tie group uniformly at random.
        ordered = sorted(records, key=lambda r: (r[1], rng.random()))
        return f"sort:{','.join(f'{c}{k}' for c, k in records)}=", "".join(c for c, _ in ordered)

    def canonical(self, prompt: str) -> str:
        # Every ordering of the same records has the same answers; hold them out together.
        return f"sort:{','.join(sorted(_records(prompt)))}="

    def check(self, prompt: str, output: str) -> bool:
        keys = {r[0]: int(r[1]) for r in _records(prompt)}
        return sorted(output) == sorted(keys) and all(keys[a] <= keys[b] for a, b in zip(output, output[1:]))


def _records(prompt: str) -> list[str]:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a keysort prompt: {prompt!r}")
    records = m[1].split(",")
    if len({r[0] for r in records}) != len(records):
        raise ValueError(f"keysort records need distinct letters: {prompt!r}")
    return records
