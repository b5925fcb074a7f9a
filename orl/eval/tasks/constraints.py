"""`constr`: constraint satisfaction with many valid answers; the verifier checks the constraints.

Four variants; the default is `ends`:
    ends:    "7 of bdg, b to g, no equal neighbours:" -> e.g. "bdbdgbg" (also "bgbgdbg", ...)
             n letters from the given ones, starting and ending with the named letters, no two equal
             adjacent letters.
    word:    "7 of bdg, 2 g, no equal neighbours:"  -> e.g. "bdbdgbg" (also "gbdbdgd", ...)
             n letters from the given ones, no two equal adjacent letters, exactly m copies of one.
    arrange: "arrange aabbbcc, no equal neighbours:" -> e.g. "bcbabca" (also "babcacb", ...)
             a rearrangement of exactly the given letters with no two equal adjacent letters.
    sum:     "4 distinct digits sum 17 incl 5:"      -> e.g. "9215" (also "0539", "5138", ...)
             k digits, pairwise distinct, any order, summing to s and containing digit d.
Each sample uses 3 letters drawn from a-h. The reference answer is drawn uniformly from all valid
answers to its prompt (the generator draws the answer first and derives the prompt from it), so the
training target is genuinely multimodal.
`sum` is off by default: a 2.4M-parameter base collapses onto the required digit ("666" for "3
distinct digits sum 16 incl 6:") and stays near chance on it; it remains a knob. `word` and `arrange`
are knobs too: a 6-layer model's errors on them are counts (a letter three times instead of twice,
the rare letter of "arrange bbffh" dropped), which it does not do reliably in either decoding order;
`ends` keeps the coupling that matters for parallel decoding (neighbours, and a last letter that
constrains the one before it) without asking the model to count (measurements:
docs/history/CODE-NOTES.md).

Why parallel decoding is non-trivial: each position's marginal is broad (many digits fit position 1),
but the positions are coupled by global constraints (a count, the exact multiset, distinctness, a sum,
a fixed last letter) and local ones (neighbours differ). Sampling several positions in one step draws
each from its own marginal, which happily yields "abbacbc" (equal neighbours), "ababa" for "arrange
aabbc" (the c lost), or "9295" (duplicate 9) even when every position on its own was a plausible
choice; only a decoder that conditions each commitment on the others stays consistent.
"""
from __future__ import annotations

import random
import re
import string

from .base import Task

_SUM = re.compile(r"([0-9]+) distinct digits sum ([0-9]+) incl ([0-9]):")
_WORD = re.compile(r"([0-9]+) of ([a-z]+), ([0-9]+) ([a-z]), no equal neighbours:")
_ARRANGE = re.compile(r"arrange ([a-z]+), no equal neighbours:")
_ENDS = re.compile(r"([0-9]+) of ([a-z]+), ([a-z]) to ([a-z]), no equal neighbours:")
VARIANTS = ("sum", "word", "arrange", "ends")


class Constr(Task):
    name = "constr"
    description = "a word from given letters with given first and last letters and no equal neighbours"
    why_parallel_is_hard = ("many answers are valid but positions are coupled by neighbour and end-letter "
                            "constraints; independently sampled positions mix incompatible answers")

    def __init__(self, min_digits: int = 3, max_digits: int = 4, min_word: int = 4, max_word: int = 7,
                 alphabet: str = "abcdefgh", letters: int = 3, variants: tuple[str, ...] = ("ends",)):
        if not 1 <= min_digits <= max_digits <= 10 or not 2 <= min_word <= max_word:
            raise ValueError("need 1 <= min_digits <= max_digits <= 10 and 2 <= min_word <= max_word")
        if len(set(alphabet)) != len(alphabet) or len(alphabet) < 2 or set(alphabet) - set(string.ascii_lowercase):
            raise ValueError("alphabet must be >= 2 distinct lowercase letters")
        if not 2 <= letters <= len(alphabet):
            raise ValueError(f"letters (per prompt) must be in [2, {len(alphabet)}], got {letters}")
        if not variants or set(variants) - set(VARIANTS):
            raise ValueError(f"variants must be a non-empty subset of {VARIANTS}")
        self.min_digits, self.max_digits, self.min_word, self.max_word = min_digits, max_digits, min_word, max_word
        # Each word draws its own `letters`-letter subset of the alphabet (named in the prompt), so that
        # prompts are diverse enough for a held-out split and the model must read its letters.
        self.alphabet, self.letters, self.variants = alphabet, letters, variants

    def generate(self, rng: random.Random) -> tuple[str, str]:
        variant = rng.choice(self.variants)
        if variant == "sum":
            # rng.sample is uniform over ordered tuples of distinct digits, so given (k, s, d) the
            # answer is uniform over that prompt's valid answers.
            digits = rng.sample(range(10), rng.randint(self.min_digits, self.max_digits))
            prompt = f"{len(digits)} distinct digits sum {sum(digits)} incl {rng.choice(digits)}:"
            return prompt, "".join(map(str, digits))
        # A random walk that never repeats the previous letter gives every valid word the same
        # probability, so the reference is again uniform given the prompt.
        alphabet = "".join(sorted(rng.sample(self.alphabet, self.letters)))
        word = [rng.choice(alphabet)]
        for _ in range(rng.randint(self.min_word, self.max_word) - 1):
            word.append(rng.choice([c for c in alphabet if c != word[-1]]))
        if variant == "arrange":
            # Every valid word has the same walk probability, so given its letters it is uniform over
            # their valid arrangements.
            return f"arrange {''.join(sorted(word))}, no equal neighbours:", "".join(word)
        if variant == "ends":
            return f"{len(word)} of {alphabet}, {word[0]} to {word[-1]}, no equal neighbours:", "".join(word)
        letter = rng.choice(alphabet)
        return f"{len(word)} of {alphabet}, {word.count(letter)} {letter}, no equal neighbours:", "".join(word)

    def check(self, prompt: str, output: str) -> bool:
        if m := _SUM.fullmatch(prompt):
            k, total, member = int(m[1]), int(m[2]), m[3]
            return (len(output) == k and set(output) <= set(string.digits) and len(set(output)) == k
                    and sum(map(int, output)) == total and member in output)
        if m := _WORD.fullmatch(prompt):
            n, alphabet, count, letter = int(m[1]), m[2], int(m[3]), m[4]
            return (len(output) == n and set(output) <= set(alphabet) and output.count(letter) == count
                    and _no_equal_neighbours(output))
        if m := _ENDS.fullmatch(prompt):
            n, alphabet, first, last = int(m[1]), m[2], m[3], m[4]
            return (len(output) == n and set(output) <= set(alphabet) and output[:1] == first
                    and output[-1:] == last and _no_equal_neighbours(output))
        if m := _ARRANGE.fullmatch(prompt):
            return sorted(output) == sorted(m[1]) and _no_equal_neighbours(output)
        raise ValueError(f"not a constr prompt: {prompt!r}")


def _no_equal_neighbours(word: str) -> bool:
    return all(a != b for a, b in zip(word, word[1:]))
