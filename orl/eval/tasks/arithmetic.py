"""`add`: arithmetic on 2-3 digit numbers, in two variants; the default is `split` (tasks v6).

    split: "?+?=347"  -> e.g. "120+227" (also "000+347", "346+001", ...)
           write N as a sum of two numbers, each zero-padded to N's padded width; any pair with
           x + y = N is right. The reference draws x uniformly from [0, N], so the training target is
           uniform over the valid answers.
    eval:  "347+085=" (or "085-347=") -> the result written backwards (least-significant digit first,
           minus sign last): 347+085 -> 432 -> "234"; 085-347 -> -262 -> "262-". The tasks v1-v5 form.
Operands, N and the split's addends are zero-padded to max_digits: digit k of every number then sits at
a fixed offset, so a small model spends its capacity on carries rather than on aligning numbers of
different lengths (our first 2.4M base, trained on unpadded operands, solved 17% after 18k samples).
The verifiers parse canonical integers (the `eval` reversal has no trailing zeros; the split's addends
have exactly the padded width) and recompute the arithmetic.

Why `split` is the default (tasks v6): a base that has learned a deterministic family commits its
answer almost at once (the v5 base wrote an `eval` answer in one forward per block at threshold 0.9,
TPF 3.91 of a ceiling of 3.95), which leaves a post-training method nothing to speed up there. In
`split` the first addend is a free choice, so a calibrated model is unsure of its digits until some
are written (a perfectly calibrated model's TPF at 0.9 is 1.33 of a ceiling of 8, runs/v6 oracle),
while the second addend is a borrow-chain subtraction N - x once x is known.

Why least-significant first in `eval`: a carry flows from low digits to high digits, so in reversed
order every answer digit depends only on the prompt and on digits to its LEFT, which a left-to-right
decoder computes with a one-digit carry.

Why parallel decoding is non-trivial: in `split`, digits of x and y committed in the same step come
from different answers unless they agree on x + y = N (a mix of "120+227" and "300+047" gives
"100+247" or "320+027": one digit of each, wrong sums); in `eval`, answer digit i depends on the carry
from every lower digit, and the answer's length and sign on the whole result.
"""
from __future__ import annotations

import random
import re

from .base import Task, draw_number, parse_int

_EVAL = re.compile(r"([0-9]+)([+-])([0-9]+)=")
_SPLIT = re.compile(r"\?\+\?=([0-9]+)")
_ADDEND = re.compile(r"([0-9]+)\+([0-9]+)")
VARIANTS = ("split", "eval")


class Add(Task):
    name = "add"
    description = "?+?=N : N (2-3 digits, zero-padded) as a sum of two zero-padded numbers; many answers"
    why_parallel_is_hard = ("the first addend is a free choice and the second is N minus it: digits committed "
                            "together must agree on one pair, and each digit of y hangs on a borrow chain")

    def __init__(self, min_digits: int = 2, max_digits: int = 3, ops: str = "+-", variants: tuple[str, ...] = ("split",)):
        if not 1 <= min_digits <= max_digits or not ops or set(ops) - {"+", "-"}:
            raise ValueError("need 1 <= min_digits <= max_digits and ops a non-empty subset of '+-'")
        if not variants or set(variants) - set(VARIANTS):
            raise ValueError(f"variants must be a non-empty subset of {VARIANTS}")
        self.min_digits, self.max_digits, self.ops, self.variants = min_digits, max_digits, ops, variants

    def generate(self, rng: random.Random) -> tuple[str, str]:
        w = self.max_digits
        if rng.choice(self.variants) == "split":
            n = draw_number(rng, self.min_digits, self.max_digits)
            x = rng.randint(0, n)
            return f"?+?={n:0{w}d}", f"{x:0{w}d}+{n - x:0{w}d}"
        a, op = draw_number(rng, self.min_digits, self.max_digits), rng.choice(self.ops)
        b = draw_number(rng, self.min_digits, self.max_digits)
        prompt = f"{a:0{w}d}{op}{b:0{w}d}="
        return prompt, str(_evaluate(prompt))[::-1]

    def canonical(self, prompt: str) -> str:
        if m := _SPLIT.fullmatch(prompt):
            return f"?+?={int(m[1])}"
        # a+b and b+a are the same problem; keep them in the same split.
        a, op, b = _parse(prompt)
        if op == "+":
            a, b = sorted((a, b))
        return f"{a}{op}{b}="

    def check(self, prompt: str, output: str) -> bool:
        if m := _SPLIT.fullmatch(prompt):
            width, total = len(m[1]), int(m[1])
            addends = _ADDEND.fullmatch(output)
            return (addends is not None and len(addends[1]) == len(addends[2]) == width
                    and int(addends[1]) + int(addends[2]) == total)
        value = parse_int(output[::-1])
        return value is not None and value == _evaluate(prompt)


def _parse(prompt: str) -> tuple[int, str, int]:
    m = _EVAL.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not an add prompt: {prompt!r}")
    return int(m[1]), m[2], int(m[3])


def _evaluate(prompt: str) -> int:
    a, op, b = _parse(prompt)
    return a + b if op == "+" else a - b
