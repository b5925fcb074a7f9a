"""`split`: write a number as a sum of two numbers; many valid answers.

Format: prompt "?+?=" + N (2-3 digits, zero-padded to 3), answer = two numbers zero-padded to N's
width joined by '+', any pair with x + y = N:
    ?+?=347  -> e.g. "120+227" (also "000+347", "346+001", ...)
The verifier parses both addends (exactly N's width, digits only) and checks the sum.

The reference answer splits N digit by digit without borrows: each digit x_i is drawn uniformly from
[0, N_i] and y_i = N_i - x_i. Every reference is valid, but not every valid answer is a reference
("159+188" sums to 347 with a carry). Why: with x uniform over [0, N] a digit of y depends on every
lower digit of x through the borrows, and a conservative decoder, which commits digits in confidence
order rather than left to right, needs the model to reason about which ranges of x a few committed
digits leave open; a tiny base learns that in AR form but not in diffusion form
(docs/history/CODE-NOTES.md). Digit-wise splits keep the free choice and make every constraint local:
y_i = N_i - x_i, whichever of the two is written first.

Why parallel decoding is non-trivial: each digit pair is a free choice (N_i + 1 of them), so a
calibrated model is unsure of both digits until one is written (its TPF at threshold 0.9 is 1.55 of
a ceiling of 8.00 on the prompts of `orl eval --limit 40`, benchmarks/oracle_tpf.py); digits
committed in the same step can come from different answers ("120+227" and "300+047" mix into
"120+047", which sums to 167). Why the family exists: a base that has learned a deterministic family
commits its answer almost at once (on `add`, TPF 3.91 of a ceiling of 3.95 at threshold 0.9), which
leaves a post-training method nothing to speed up there.
"""
from __future__ import annotations

import random
import re

from .base import Task, draw_number

_PROMPT = re.compile(r"\?\+\?=([0-9]+)")
_ANSWER = re.compile(r"([0-9]+)\+([0-9]+)")


class Split(Task):
    name = "split"
    description = "?+?=N : N (2-3 digits, zero-padded) as a sum of two zero-padded numbers; many answers"
    why_parallel_is_hard = ("every digit pair is a free choice that must sum to N's digit; digits committed "
                            "together can come from different answers")

    def __init__(self, min_digits: int = 2, max_digits: int = 3, pad: bool = True):
        """pad: zero-pad N to max_digits (a fixed answer width); False writes N with its own digits, so
        the answer width follows N's size (the length-varied suite)."""
        if not 1 <= min_digits <= max_digits:
            raise ValueError("need 1 <= min_digits <= max_digits")
        self.min_digits, self.max_digits, self.pad = min_digits, max_digits, pad

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n = f"{draw_number(rng, self.min_digits, self.max_digits):0{self.max_digits if self.pad else 1}d}"
        x = "".join(str(rng.randint(0, int(d))) for d in n)
        y = "".join(str(int(d) - int(c)) for d, c in zip(n, x))
        return f"?+?={n}", f"{x}+{y}"

    def canonical(self, prompt: str) -> str:
        return f"?+?={int(_parse(prompt))}"

    def check(self, prompt: str, output: str) -> bool:
        n = _parse(prompt)
        m = _ANSWER.fullmatch(output)
        return m is not None and len(m[1]) == len(m[2]) == len(n) and int(m[1]) + int(m[2]) == int(n)


def _parse(prompt: str) -> str:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a split prompt: {prompt!r}")
    return m[1]
