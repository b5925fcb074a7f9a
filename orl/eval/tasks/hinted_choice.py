"""Index hints for the three multi-answer v7 families (split7, constr7, keysort7), as tasks/hinted.py does for
long7 and prog7: the answer's length and alignment come from markers in the prompt, found by content, not
from a count or a distance that sizes past the training range exceed.

Every v7 base failed these three beyond their range by length (docs/TRAINING.md, "The AR stage's end"):
split7 answers with too few digits, constr7 at 11-12 letters often answers one letter, keysort7 stops near
the range's record count. The hinted formats keep each family's free choices (any valid answer is right,
the reference draws one at random) and change only what locates the answer's elements and its end:

    split7xp   ?+?=a3b4c7:a                                  -> 1b2c3+a2b2c4    N's digits carry markers (a run
                                                                 of a-zA-Z), both addends repeat them, the first
                                                                 marker closes the prompt
    constr7xp  PQRSTUV of bdg, b to g, no equal neighbours:P -> bQdRbSdTgUbVg   one slot marker (a run of A-Z) per
                                                                 letter instead of the count "7"; the first closes
                                                                 the prompt
    constr7xq  PQRSTUV of bdg, P=b, V=g, no equal neighbours:P -> the same      constr7xp with the end letters keyed
                                                                 by their slot markers (session 45)
    keysort7x  ksort:c3,a1,b3,d2=                            -> a1d2c3b3        the answer is the records themselves
                                                                 (also a1d2b3c3): each carries its key, so the
                                                                 answer shows where in the key order it is

keysort7x has no prefilled marker: its first element is the smallest key's record, part of what is asked.
New names (a name fixes a family's prompts for good), wrapped by `Sized` with the v7 ranges in the registry;
results on them are results on the hinted formats, reported next to the v7 families', never in their place.
`markers_right(prompt, output)` is the shape: the answer's alignment and length right, whatever its choices.
"""
from __future__ import annotations

import random
import re
import string
from typing import NamedTuple

from .base import Task, draw_number
from .constraints import _no_equal_neighbours
from .hinted import MARKERS, marker_run
from .keysort import KeySort

_SPLIT = re.compile(r"\?\+\?=((?:[a-zA-Z][0-9])+):([a-zA-Z])")
_SPLIT_ANSWER = re.compile(r"((?:[a-zA-Z][0-9])+)\+((?:[a-zA-Z][0-9])+)")
_CONSTR = re.compile(r"(?P<slots>[A-Z]+) of (?P<letters>[a-z]+), (?P<first>[a-z]) to (?P<last>[a-z]), no equal neighbours:[A-Z]")
_CONSTR_KEYED = re.compile(r"(?P<slots>[A-Z]+) of (?P<letters>[a-z]+), [A-Z]=(?P<first>[a-z]), [A-Z]=(?P<last>[a-z]), "
                           r"no equal neighbours:[A-Z]")
_KEYS = re.compile(r"ksort:([a-z][0-9](?:,[a-z][0-9])*)=")
_RECORDS = re.compile(r"(?:[a-z][0-9])+")  # strict: `.` in a pair pattern would skip a newline the model wrote


class SplitHints(Task):
    name = "split_hints"
    description = "?+?=a3b4c7:a ; N with marked digits as a sum of two numbers of N's width, markers repeated"
    why_parallel_is_hard = ("every digit pair is a free choice that must sum to N's digit; digits committed "
                            "together can come from different answers")

    def __init__(self, lo: int, hi: int):
        if not 1 <= lo <= hi <= len(MARKERS):
            raise ValueError(f"split_hints: need 1 <= lo <= hi <= {len(MARKERS)} digits, got {lo}, {hi}")
        self.lo, self.hi = lo, hi

    def generate(self, rng: random.Random) -> tuple[str, str]:
        n = str(draw_number(rng, self.lo, self.hi))
        marks = marker_run(rng, MARKERS, len(n), len(n))[1]
        # split7's reference: each digit split without borrows, x_i uniform in [0, N_i]
        x = [str(rng.randint(0, int(d))) for d in n]
        y = [str(int(d) - int(c)) for d, c in zip(n, x)]
        answer = "".join(m + c for m, c in zip(marks, x)) + "+" + "".join(m + c for m, c in zip(marks, y))
        return "?+?=" + "".join(m + d for m, d in zip(marks, n)) + ":" + marks[0], answer[1:]

    def parse(self, prompt: str) -> tuple[str, str]:
        """(markers, N's digits)."""
        m = _SPLIT.fullmatch(prompt)
        marks, digits = (m[1][::2], m[1][1::2]) if m else ("", "")
        if m is None or m[2] != marks[0] or marks not in MARKERS or digits[0] == "0":
            raise ValueError(f"not a split_hints prompt (N's digits, no leading zero, marked by a run of a-zA-Z, "
                             f"the first marker closing it): {prompt!r}")
        return marks, digits

    def canonical(self, prompt: str) -> str:
        # the marker run's start carries no content: the same N with other markers is the same problem, held
        # out together (without this, most held-out N were trained under other markers)
        return f"?+?={self.parse(prompt)[1]}"

    def addends(self, marks: str, output: str) -> tuple[str, str] | None:
        """The two addends' digits when each repeats N's markers in order, else None."""
        m = _SPLIT_ANSWER.fullmatch(marks[0] + output.rstrip())
        if m is None or any(part[::2] != marks for part in m.groups()):
            return None
        return m[1][1::2], m[2][1::2]

    def markers_right(self, prompt: str, output: str) -> bool:
        return self.addends(self.parse(prompt)[0], output) is not None

    def check(self, prompt: str, output: str) -> bool:
        marks, n = self.parse(prompt)
        addends = self.addends(marks, output)
        return addends is not None and int(addends[0]) + int(addends[1]) == int(n)


class ConstrPrompt(NamedTuple):
    slots: str     # the run of A-Z slot markers, one per letter
    letters: str   # the letters a word may use
    first: str     # the letter the word starts with
    last: str      # the letter it ends with


class ConstrHints(Task):
    name = "constr_hints"
    description = "PQRS of bdg, b to g, no equal neighbours:P ; one letter per slot marker, ends fixed, no equal neighbours"
    why_parallel_is_hard = ("many answers are valid but positions are coupled by neighbour and end-letter "
                            "constraints; independently sampled positions mix incompatible answers")
    pattern = _CONSTR
    rules = "a run of A-Z slots, the first closing it; distinct letters that include both ends"

    def __init__(self, lo: int, hi: int, alphabet: str = "abcdefgh", letters: int = 3):
        if not 2 <= lo <= hi <= 26:
            raise ValueError(f"{self.name}: need 2 <= lo <= hi <= 26 letters (one marker A-Z each), got {lo}, {hi}")
        self.lo, self.hi, self.alphabet, self.letters = lo, hi, alphabet, letters

    def generate(self, rng: random.Random) -> tuple[str, str]:
        # constr7's `ends` draw: a letter subset, then a uniform walk without equal neighbours (uniform over
        # the valid words of that length, so the reference is uniform given the prompt)
        alphabet = "".join(sorted(rng.sample(self.alphabet, self.letters)))
        n, slots = marker_run(rng, string.ascii_uppercase, self.lo, self.hi)
        word = [rng.choice(alphabet)]
        for _ in range(n - 1):
            word.append(rng.choice([c for c in alphabet if c != word[-1]]))
        return self.render(ConstrPrompt(slots, alphabet, word[0], word[-1])), "".join(
            s + c for s, c in zip(slots, word))[1:]

    def render(self, c: ConstrPrompt) -> str:
        return f"{c.slots} of {c.letters}, {c.first} to {c.last}, no equal neighbours:{c.slots[0]}"

    def parse(self, prompt: str) -> ConstrPrompt:
        m = self.pattern.fullmatch(prompt)
        c = ConstrPrompt(*m.group("slots", "letters", "first", "last")) if m else None
        if (c is None or c.slots not in string.ascii_uppercase or len(set(c.letters)) != len(c.letters)
                or not {c.first, c.last} <= set(c.letters) or prompt != self.render(c)):
            raise ValueError(f"not a {self.name} prompt ({self.rules}): {prompt!r}")
        return c

    def canonical(self, prompt: str) -> str:
        c = self.parse(prompt)  # as for split_hints: the same problem under other slot markers is held out with it
        return f"{len(c.slots)} of {c.letters}, {c.first} to {c.last}, no equal neighbours:"

    @staticmethod
    def _word(c: ConstrPrompt, output: str) -> str | None:
        """The answer's letters when it has one after each slot marker, in order, else None."""
        text = c.slots[0] + output.rstrip()
        return text[1::2] if len(text) % 2 == 0 and text[::2] == c.slots else None

    def markers_right(self, prompt: str, output: str) -> bool:
        return self._word(self.parse(prompt), output) is not None

    def check(self, prompt: str, output: str) -> bool:
        c = self.parse(prompt)
        word = self._word(c, output)
        return (word is not None and set(word) <= set(c.letters) and word[0] == c.first and word[-1] == c.last
                and _no_equal_neighbours(word))


class ConstrKeyed(ConstrHints):
    """constr7xp with each end letter named by its slot marker (`P=b, V=g`) instead of `b to g`: the five-family AR
    stage of session 44 ignored the end on constr7xp (its penultimate letter was the end letter on 119 of 179 wrong
    in-range answers; on the other 60 the end letter was free and not written), and without a helper constr7xp
    stopped early beyond its range. Keyed by content, the last slot is found by a look-up of the marker the walk
    writes next, as the other hinted families find their elements; the choices and the verifier stay the family's.
    Its canonical problem is constr7xp's (the registry draws it as constr7xp: `draws_as`)."""
    name = "constr_keyed"
    description = "PQRS of bdg, P=b, S=g, no equal neighbours:P ; one letter per slot marker, ends keyed by marker"
    pattern = _CONSTR_KEYED
    rules = ("a run of A-Z slots, the first closing it; distinct letters that include both ends, keyed to the first "
             "and the last slot")

    def render(self, c: ConstrPrompt) -> str:
        return f"{c.slots} of {c.letters}, {c.slots[0]}={c.first}, {c.slots[-1]}={c.last}, no equal neighbours:{c.slots[0]}"


class KeysortHints(Task):
    name = "keysort_keys"
    description = "ksort:c3,a1,b3= ; answer the records ordered by key (a1c3b3 or a1b3c3), ties in any order"
    why_parallel_is_hard = KeySort.why_parallel_is_hard

    def __init__(self, lo: int, hi: int, letters: str):
        self.inner = KeySort(lo, hi, letters=letters)

    def generate(self, rng: random.Random) -> tuple[str, str]:
        prompt, order = self.inner.generate(rng)
        keys = {r[0]: r[1] for r in prompt[len("sort:"):-1].split(",")}
        return "k" + prompt, "".join(c + keys[c] for c in order)

    def records(self, prompt: str) -> list[str]:
        m = _KEYS.fullmatch(prompt)
        records = m[1].split(",") if m else []
        if m is None or len({r[0] for r in records}) != len(records):
            raise ValueError(f"not a keysort_keys prompt (records of distinct letters): {prompt!r}")
        return records

    def canonical(self, prompt: str) -> str:
        return f"ksort:{','.join(sorted(self.records(prompt)))}="  # every order of the same records together

    def markers_right(self, prompt: str, output: str) -> bool:
        records, out = self.records(prompt), output.rstrip()
        return _RECORDS.fullmatch(out) is not None and sorted(out[::2]) == sorted(r[0] for r in records)

    def check(self, prompt: str, output: str) -> bool:
        records, out = self.records(prompt), output.rstrip()
        pairs = [out[i:i + 2] for i in range(0, len(out), 2)]
        return (_RECORDS.fullmatch(out) is not None and sorted(pairs) == sorted(records)
                and all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:])))
