"""`constr`: constraint satisfaction with many valid answers; the verifier checks the constraints.

Two variants, picked at random per sample:
    sum:  "4 distinct digits sum 17 incl 5:"      -> e.g. "9215" (also "0539", "5138", ...)
          k digits, pairwise distinct, any order, summing to s and containing digit d.
    word: "7 of abc, 2 c, no equal neighbours:"   -> e.g. "ababcbc" (also "cabcaba", ...)
          n letters from the alphabet, no two equal adjacent letters, exactly m copies of letter c.
The reference answer is drawn uniformly from all valid answers to its prompt (the generator draws the
answer first and derives the prompt from it), so the training target is genuinely multimodal.

Why parallel decoding is non-trivial: each position's marginal is broad (many digits fit position 1),
but the positions are coupled by global constraints (distinctness, a sum, a count) and local ones
(neighbours differ). Sampling several positions in one step draws each from its own marginal, which
happily yields "9295" (duplicate 9) or "abbacbc" (equal neighbours) even when every position on its own
was a plausible choice; only a decoder that conditions each commitment on the others stays consistent.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task

_SUM = re.compile(r"([0-9]+) distinct digits sum ([0-9]+) incl ([0-9]):")
_WORD = re.compile(r"([0-9]+) of ([a-z]+), ([0-9]+) ([a-z]), no equal neighbours:")
VARIANTS = ("sum", "word")


class Constr(Task):
    name = "constr"
    description = "distinct digits with a given sum and member, or a word with a letter count and no equal neighbours"
    why_parallel_is_hard = ("many answers are valid but positions are coupled by distinctness, sum, count and "
                            "neighbour constraints; independently sampled positions mix incompatible answers")

    def __init__(self, min_digits: int = 3, max_digits: int = 4, min_word: int = 4, max_word: int = 7,
                 alphabet: str = "abc", variants: tuple[str, ...] = VARIANTS):
        if not 1 <= min_digits <= max_digits <= 10 or not 2 <= min_word <= max_word:
            raise ValueError("need 1 <= min_digits <= max_digits <= 10 and 2 <= min_word <= max_word")
        if len(set(alphabet)) != len(alphabet) or len(alphabet) < 2 or set(alphabet) - set(string.ascii_lowercase):
            raise ValueError("alphabet must be >= 2 distinct lowercase letters")
        if not variants or set(variants) - set(VARIANTS):
            raise ValueError(f"variants must be a non-empty subset of {VARIANTS}")
        self.min_digits, self.max_digits, self.min_word, self.max_word = min_digits, max_digits, min_word, max_word
        self.alphabet, self.variants = alphabet, variants

    def generate(self, rng: random.Random) -> tuple[str, str]:
        if rng.choice(self.variants) == "sum":
            # rng.sample is uniform over ordered tuples of distinct digits, so given (k, s, d) the
            # answer is uniform over that prompt's valid answers.
            digits = rng.sample(range(10), rng.randint(self.min_digits, self.max_digits))
            prompt = f"{len(digits)} distinct digits sum {sum(digits)} incl {rng.choice(digits)}:"
            return prompt, "".join(map(str, digits))
        # A random walk that never repeats the previous letter gives every valid word the same
        # probability, so the reference is again uniform given the prompt.
        word = [rng.choice(self.alphabet)]
        for _ in range(rng.randint(self.min_word, self.max_word) - 1):
            word.append(rng.choice([c for c in self.alphabet if c != word[-1]]))
        letter = rng.choice(self.alphabet)
        return f"{len(word)} of {self.alphabet}, {word.count(letter)} {letter}, no equal neighbours:", "".join(word)

    def check(self, prompt: str, output: str) -> bool:
        if m := _SUM.fullmatch(prompt):
            k, total, member = int(m[1]), int(m[2]), m[3]
            return (len(output) == k and set(output) <= set(string.digits) and len(set(output)) == k
                    and sum(map(int, output)) == total and member in output)
        if m := _WORD.fullmatch(prompt):
            n, alphabet, count, letter = int(m[1]), m[2], int(m[3]), m[4]
            return (len(output) == n and set(output) <= set(alphabet) and output.count(letter) == count
                    and all(a != b for a, b in zip(output, output[1:])))
        raise ValueError(f"not a constr prompt: {prompt!r}")
