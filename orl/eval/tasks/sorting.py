"""`sort`: sort a short list of single characters (all digits or all lowercase letters).

Format: prompt "sort:" + items joined by ',' + "=", answer = the same multiset in ascending character
order joined by ',':
    sort:5,2,9,1,2=  -> "1,2,2,5,9"
    sort:q,d,x,d=    -> "d,d,q,x"
Repeats are allowed. The verifier sorts the prompt's items itself and requires that exact string.

Why parallel decoding is non-trivial: the item at answer position i is the i-th order statistic, a
function of the whole input, and the answer must be a permutation of the input. Positions committed
independently each pick a plausible value from the input, so two of them can choose the same item
("1,2,5,5") while another item is dropped, or produce a locally-sorted but globally wrong sequence;
only positions decoded with sight of their neighbours can keep the multiset intact.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task

_PROMPT = re.compile(r"sort:([^,=](?:,[^,=])*)=")


class Sort(Task):
    name = "sort"
    description = "sort:<4-6 digits or letters, comma separated>= ; answer is the sorted list"
    why_parallel_is_hard = ("each output position is an order statistic of the whole input and the output must "
                            "be a permutation of it; independent positions duplicate or drop items")

    def __init__(self, min_len: int = 4, max_len: int = 6,
                 alphabets: tuple[str, ...] = (string.digits, string.ascii_lowercase)):
        if not 1 <= min_len <= max_len or not alphabets or any(not a or set(a) & {",", "="} for a in alphabets):
            raise ValueError("need 1 <= min_len <= max_len and non-empty alphabets without ',' or '='")
        self.min_len, self.max_len, self.alphabets = min_len, max_len, alphabets

    def generate(self, rng: random.Random) -> tuple[str, str]:
        alphabet = rng.choice(self.alphabets)
        items = [rng.choice(alphabet) for _ in range(rng.randint(self.min_len, self.max_len))]
        return f"sort:{','.join(items)}=", ",".join(sorted(items))

    def canonical(self, prompt: str) -> str:
        # Every ordering of the same multiset has the same answer; hold them out together.
        return f"sort:{','.join(sorted(_items(prompt)))}="

    def check(self, prompt: str, output: str) -> bool:
        return output == ",".join(sorted(_items(prompt)))


def _items(prompt: str) -> list[str]:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a sort prompt: {prompt!r}")
    return m[1].split(",")
