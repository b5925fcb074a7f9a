"""Length helpers of the hinted multi-answer families (tasks/hinted_choice.py), as tasks/hint_helpers.py has for
long7xp and prog7xp: the family's format at sizes past its range, without its choices (one answer per prompt);
split7xph and keysort7xh under their own openings, constr7xph (constr7xqh for constr7xq) as the family's own format
with two letters. Training only, never a headline; rollouts and held-out
means skip them (`HELPER_NAMES`). Why: prog7xp followed its markers by content yet stopped after the range's
longest answer until a same-format helper at 2-14 statements trained where such an answer ends (session 19).

    helper      for        prompt -> answer                               sizes
    split7xph   split7xp   dup:a3b4c7:a -> 3b4c7+a3b4c7                   2-12 digits (N + N: never valid in the family)
    split7xps   split7xp   ?+?=a3b4c7:a1b2c0+ -> a2b2c7                  2-12 digits (the family with its choice, the
                                                                          first addend, made in the prompt)
    split7xpc   split7xp   copy:a3b4c7:a -> 3b4c7                         2-12 digits (N's marked copy: where the first
                                                                          addend ends, which split7xps never trains)
    constr7xph  constr7xp  PQRST of bd, b to b, no equal neighbours:P      3-20 slots (two letters: one answer,
                           -> bQdRbSdTb                                     valid in the family too)
    keysort7xh  keysort7x  kcopy:c3,a1,b3= -> c3a1b3                      3-12 records, a-l (the records as given)
    constr7xpe  constr7xp  PQR of bdg, b to g, no equal neighbours:PbQdR   3-20 slots (the family with the walk given
                           -> g                                             up to the last slot: its end letter)
    constr7xqh  constr7xq  PQRST of bd, P=b, T=b, no equal neighbours:P    3-20 slots (constr7xph with keyed ends)
                           -> bQdRbSdTb
"""
from __future__ import annotations

import random
import re
import string

from .base import draw_number
from .helpers import Helper
from .hinted import MARKERS, marker_run
from .hinted_choice import ConstrHints
from .keysort import KEYSORT7_LETTERS


def _marked_n(rng: random.Random, lo: int, hi: int) -> tuple[str, str, str]:
    """(markers, N's digits, N marked as `a3b4c7`): N as split7xp draws it, under a marker run as long as N."""
    n = str(draw_number(rng, lo, hi))
    marks = marker_run(rng, MARKERS, len(n), len(n))[1]
    return marks, n, "".join(m + d for m, d in zip(marks, n))


class _MarkedN(Helper):
    """A split7xp helper whose prompt's first group is N marked (`a3b4c7`): its size is N's digit count."""
    max_size = len(MARKERS)  # one marker per digit

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1]) // 2


class DupMarked(_MarkedN):
    """N + N (2N, never a valid split7xp answer for N > 0): a helper whose answers were valid in the family would
    reward copying N and remove the free choice unseen; this one shows up as errors if it leaks."""
    name, family = "split7xph", "split7xp"
    pattern = re.compile(r"dup:((?:[a-zA-Z][0-9])+):([a-zA-Z])")
    description = "dup:a3b4c7:a ; answer 3b4c7+a3b4c7 (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks, _, marked = _marked_n(rng, self.lo, self.hi)
        prompt = "dup:" + marked + ":" + marks[0]
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        marks = m[1][::2]
        if m[2] != marks[0] or marks not in MARKERS:
            raise ValueError(f"not a {self.name} prompt (a run of markers, the first closing it): {prompt!r}")
        return (m[1] + "+" + m[1])[1:]


class _SplitFamilySplit(_MarkedN):
    """A split7xp helper whose training draws skip the family's held-out N: split7xps prompts with a complete valid
    family answer, so drawing N by its own hash would train the family's held-out problems (the review of session 44
    found 171 of 300 held-out N among 20,000 draws). Beyond-range N are drawn freely (at 6-7 digits a test N is
    one of about 10^6; the expected overlap of a run's draws with the test prompts is below 0.1)."""

    def split_of(self, prompt: str) -> str:
        from . import get_task  # the registry imports this module
        marked = self.parse(prompt)[1]
        return get_task(self.family).split_of("?+?=" + marked + ":" + marked[0])


class SecondAddend(_SplitFamilySplit):
    """split7xp's own format with the free choice made: the prompt carries the first addend (drawn as the family's
    reference draws it) and the answer is the one second addend. Its loss is on the part of the answer that takes two
    look-ups by marker (N_i and x_i) and where the answer ends, at sizes past the range; the choice itself is never
    trained outside the range, so nothing here narrows it. Session 43's `dup:` helper (split7xph) taught the length
    but at 4,000 steps its `N+N` merged into the family's answers (three addends); this one has nothing to merge.
    The answer starts with the second addend's first marker, as the family's does after `+`: a first version that
    gave it in the prompt (`...+a` -> `2b2c7`, session 44's first two pilots) left beyond answers that skip it."""
    name, family = "split7xps", "split7xp"
    pattern = re.compile(r"\?\+\?=((?:[a-zA-Z][0-9])+):((?:[a-zA-Z][0-9])+)\+")
    description = "?+?=a3b4c7:a1b2c0+ ; answer a2b2c7, N minus the given first addend (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks, n, marked = _marked_n(rng, self.lo, self.hi)
        first = "".join(m + str(rng.randint(0, int(d))) for m, d in zip(marks, n))  # split7xp's reference draw
        prompt = "?+?=" + marked + ":" + first + "+"
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        marks, n, x = m[1][::2], m[1][1::2], m[2][1::2]
        if (m[2][::2] != marks or marks not in MARKERS or n[0] == "0"
                or any(a > b for a, b in zip(x, n))):
            raise ValueError(f"not a {self.name} prompt (N's digits marked by a run of a-zA-Z, a first addend under "
                             f"the same markers with each digit at most N's, then +): {prompt!r}")
        return "".join(mk + str(int(d) - int(c)) for mk, d, c in zip(marks, n, x))


class MarkedCopy(_SplitFamilySplit):
    """N's marked copy, the part of split7xph that split7xps lacks: with split7xps alone (a warm-started session-44
    pilot) the first addend stopped at the range's 5 digits on every beyond prompt and the second followed it. One
    number, no `+`: nothing to merge into the family's two addends."""
    name, family = "split7xpc", "split7xp"
    pattern = re.compile(r"copy:((?:[a-zA-Z][0-9])+):([a-zA-Z])")
    description = "copy:a3b4c7:a ; answer 3b4c7, N as marked (helper, training only)"

    def generate(self, rng: random.Random) -> tuple[str, str]:
        marks, _, marked = _marked_n(rng, self.lo, self.hi)
        prompt = "copy:" + marked + ":" + marks[0]
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        if m[2] != m[1][0] or m[1][::2] not in MARKERS or m[1][1] == "0":
            raise ValueError(f"not a {self.name} prompt (N's digits, no leading zero, marked by a run of markers, the "
                             f"first closing it): {prompt!r}")
        return m[1][1:]


class TwoLetterEnds(Helper):
    """constr7xp's own format with two letters instead of three: no equal neighbours then forces the word (it
    alternates), so the answer is unique, and it is valid in the family too. Session 43's first helper, a
    two-letter alternation under its own opening (`PQRST of bd, alternate:P`), taught the length (78 of 80 beyond
    answers with the right slots) but leaked its pattern: in-range answers repeated letters and ignored the end."""
    name, family = "constr7xph", "constr7xp"
    pattern = re.compile(r"([A-Z]+) of ([a-z])([a-z]), ([a-z]) to ([a-z]), no equal neighbours:([A-Z])")
    description = "PQRST of bd, b to b, no equal neighbours:P ; answer bQdRbSdTb (helper, training only)"
    max_size = 26  # slots A-Z

    def generate(self, rng: random.Random) -> tuple[str, str]:
        slots = marker_run(rng, string.ascii_uppercase, self.lo, self.hi)[1]
        pair = sorted(rng.sample("abcdefgh", 2))
        first = rng.choice(pair)
        last = first if len(slots) % 2 else pair[1] if first == pair[0] else pair[0]
        prompt = self.render(slots, "".join(pair), first, last)
        return prompt, self.answer(prompt)

    def render(self, slots: str, pair: str, first: str, last: str) -> str:
        return f"{slots} of {pair}, {first} to {last}, no equal neighbours:{slots[0]}"

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        slots, pair, first, last = m[1], (m[2], m[3]), m[4], m[5]
        other = pair[1] if first == pair[0] else pair[0]
        word = [(first, other)[i % 2] for i in range(len(slots))] if first in pair and pair[0] != pair[1] else []
        if (slots not in string.ascii_uppercase or pair[0] == pair[1] or not word or word[-1] != last
                or prompt != self.render(slots, "".join(pair), first, last)):
            raise ValueError(f"not a {self.name} prompt (a run of A-Z slots, the first closing it; two letters, ends "
                             f"that an alternation reaches): {prompt!r}")
        return "".join(s + c for s, c in zip(slots, word))[1:]

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[1])


class TwoLetterKeyed(TwoLetterEnds):
    """constr7xph for constr7xq: the two-letter walk with its ends keyed by slot marker, the family's own format (its
    answers valid in the family too), 3-20 slots: the length a keyed constr7xq pilot without a helper stopped short of
    (session 45: 100% in range, 22.5% beyond, every beyond failure past the last slot)."""
    name, family = "constr7xqh", "constr7xq"
    pattern = re.compile(r"([A-Z]+) of ([a-z])([a-z]), [A-Z]=([a-z]), [A-Z]=([a-z]), no equal neighbours:([A-Z])")
    description = "PQRST of bd, P=b, T=b, no equal neighbours:P ; answer bQdRbSdTb (helper, training only)"

    def render(self, slots: str, pair: str, first: str, last: str) -> str:
        return f"{slots} of {pair}, {slots[0]}={first}, {slots[-1]}={last}, no equal neighbours:{slots[0]}"


class EndLetter(Helper):
    """constr7xp's own format with the walk given up to the last slot; the answer is the end letter. The five-family
    AR stage of session 44 wrote the right slots on every in-range constr7xp prompt and missed the end letter on 61
    of 100 (`MNOPQRST of acd, d to c` -> `...dTa`, where c was free to write): this trains that last step at every
    size, the walk drawn as the family's reference draws it, so no choice is narrowed. Draws skip the family's
    held-out problems (its split decides), since each prompt and answer is a complete family answer. Its warm pilot
    (session 44) learned it and got worse on the family (52.5% / 12.5% against 71.3% / 31.2%: early stops beyond),
    so no recipe uses it; kept so that the pilot reruns."""
    name, family = "constr7xpe", "constr7xp"
    pattern = re.compile(r"(([A-Z]+) of ([a-z]+), ([a-z]) to ([a-z]), no equal neighbours:)((?:[A-Z][a-z])+[A-Z])")
    description = "PQR of bdg, b to g, no equal neighbours:PbQdR ; answer g, the end letter (helper, training only)"
    max_size = 26  # slots A-Z

    def __init__(self, lo: int, hi: int):
        super().__init__(lo, hi)
        self.walks = ConstrHints(lo, hi)  # the family's draw at the helper's sizes

    def generate(self, rng: random.Random) -> tuple[str, str]:
        prompt, answer = self.walks.generate(rng)
        prompt = prompt + answer[:-1]
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        m = self.parse(prompt)
        slots, letters, first, last, walk = m[2], m[3], m[4], m[5], m[6]
        word = walk[1::2]
        if (walk[::2] != slots or slots not in string.ascii_uppercase or len(set(letters)) != len(letters)
                or not {first, last} | set(word) <= set(letters) or word[:1] != first or word[-1] == last
                or any(a == b for a, b in zip(word, word[1:]))):
            raise ValueError(f"not a {self.name} prompt (a run of A-Z slots, the walk under them up to the last one: "
                             f"from the first letter, in the letters, no equal neighbours, not ending where it must "
                             f"end next): {prompt!r}")
        return last

    def split_of(self, prompt: str) -> str:
        from . import get_task  # the registry imports this module
        m = self.parse(prompt)
        return get_task(self.family).split_of(m[1] + m[2][0])  # the family's prompt: its text up to the first slot

    def size(self, prompt: str) -> int:
        return len(self.parse(prompt)[2])


class CopyRecords(Helper):
    name, family = "keysort7xh", "keysort7x"
    pattern = re.compile(r"kcopy:([a-z][0-9](?:,[a-z][0-9])*)=")
    description = "kcopy:c3,a1,b3= ; answer c3a1b3, the records as given (helper, training only)"
    max_size = len(KEYSORT7_LETTERS)  # distinct letters

    def generate(self, rng: random.Random) -> tuple[str, str]:
        letters = rng.sample(KEYSORT7_LETTERS, rng.randint(self.lo, self.hi))
        prompt = "kcopy:" + ",".join(f"{c}{rng.randint(1, 5)}" for c in letters) + "="
        return prompt, self.answer(prompt)

    def answer(self, prompt: str) -> str:
        records = self.parse(prompt)[1].split(",")
        if len({r[0] for r in records}) != len(records):
            raise ValueError(f"not a {self.name} prompt (records of distinct letters): {prompt!r}")
        return "".join(records)

    def size(self, prompt: str) -> int:
        return self.parse(prompt)[1].count(",") + 1


CHOICE_HELPERS = (DupMarked(2, 12), TwoLetterEnds(3, 20), CopyRecords(3, 12), SecondAddend(2, 12), MarkedCopy(2, 12), EndLetter(3, 20),
                  TwoLetterKeyed(3, 20))
