"""`add`: addition and subtraction of 2-3 digit numbers, answer written backwards.

Format: prompt "347+085=" (or "085-347="; operands zero-padded to max_digits), answer = the decimal
result reversed character by character, i.e. least-significant digit first, with a minus sign (if any)
last:
    347+085=  -> 432 -> "234"
    085-347=  -> -262 -> "262-"
The verifier reverses the output, parses it as a canonical integer (no leading zeros, so no trailing
zeros in the reversed form) and compares it with the result computed from the prompt.

Why zero-padded operands: digit k of both operands then sits at a fixed offset from the start of the
prompt, so a small model spends its capacity on carries rather than on aligning numbers of different
lengths (our first 2.4M base, trained on unpadded operands, solved 17% after 18k addition samples).

Why least-significant first: a carry (or borrow) flows from low digits to high digits, so in reversed
order every answer digit depends only on the prompt and on digits to its LEFT. A left-to-right decoder
can then compute the answer with a one-digit carry, which tiny models learn; in natural order the first
digit written would depend on all carries still to come.

Why parallel decoding is non-trivial: answer digit i is (a_i + b_i + carry_i) mod 10 where carry_i
depends on every lower digit, so digits committed in the same step must agree on the carry chain (a
run like 999+1 flips every digit together). The answer's length (where EOS goes) and the sign position
depend on the final carry and on which operand is larger, again a whole-number property.
"""
from __future__ import annotations

import random
import re

from .base import Task, draw_number, parse_int

_PROMPT = re.compile(r"([0-9]+)([+-])([0-9]+)=")


class Add(Task):
    name = "add"
    description = "a+b= or a-b= with 2-3 digit zero-padded operands; answer is the result written backwards"
    why_parallel_is_hard = ("each answer digit depends on the carry from all lower digits, and the length and "
                            "sign depend on the whole result")

    def __init__(self, min_digits: int = 2, max_digits: int = 3, ops: str = "+-"):
        if not 1 <= min_digits <= max_digits or not ops or set(ops) - {"+", "-"}:
            raise ValueError("need 1 <= min_digits <= max_digits and ops a non-empty subset of '+-'")
        self.min_digits, self.max_digits, self.ops = min_digits, max_digits, ops

    def generate(self, rng: random.Random) -> tuple[str, str]:
        a, op = draw_number(rng, self.min_digits, self.max_digits), rng.choice(self.ops)
        b = draw_number(rng, self.min_digits, self.max_digits)
        w = self.max_digits
        prompt = f"{a:0{w}d}{op}{b:0{w}d}="
        return prompt, str(_evaluate(prompt))[::-1]

    def canonical(self, prompt: str) -> str:
        # a+b and b+a are the same problem; keep them in the same split.
        a, op, b = _parse(prompt)
        if op == "+":
            a, b = sorted((a, b))
        return f"{a}{op}{b}="

    def check(self, prompt: str, output: str) -> bool:
        value = parse_int(output[::-1])
        return value is not None and value == _evaluate(prompt)


def _parse(prompt: str) -> tuple[int, str, int]:
    m = _PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not an add prompt: {prompt!r}")
    return int(m[1]), m[2], int(m[3])


def _evaluate(prompt: str) -> int:
    a, op, b = _parse(prompt)
    return a + b if op == "+" else a - b
