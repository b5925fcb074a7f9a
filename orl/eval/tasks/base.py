"""Sample, Task base class and the split rule shared by every synthetic task family.

Splits are disjoint by construction: a stable hash of a prompt's canonical form puts it in exactly one
of `train` and `heldout`, and `Task.sample` rejects draws whose prompt belongs to the other one. A
third split, `beyond`, exists only for length-varied families (tasks/sized.py): its prompts are drawn
at sizes outside the training range, so they are held out by their size and no hash is needed. Families whose prompts
have equivalent rewrites (a+b vs b+a, permutations of a list to sort) override `canonical` so that all
rewrites of a held-out prompt are held out too.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

SPLITS = ("train", "heldout")  # the hash splits every family has
BEYOND = "beyond"              # sizes beyond the training range; only families that define it
HELDOUT_PERCENT = 10
# Every family's prompts fall in the held-out split with probability ~10%, so a few hundred
# draws always find one; running out means the knobs leave a split empty.
MAX_DRAWS = 10_000

_INT = re.compile(r"0|-?[1-9][0-9]*")


def parse_int(text: str) -> int | None:
    """Canonical decimal integer (no leading zeros, no '+', no '-0'), else None.

    Verifiers are strict so that exactly one string spells each number: a model that pads with zeros
    has not produced the reference format.
    """
    return int(text) if _INT.fullmatch(text) else None


def draw_number(rng: random.Random, min_digits: int, max_digits: int) -> int:
    """A number whose digit count is drawn first (uniform over [min_digits, max_digits]), then its value:
    drawing the value directly would give 9 numbers of d + 1 digits for every one of d digits."""
    d = rng.randint(min_digits, max_digits)
    return rng.randint(10 ** (d - 1) if d > 1 else 0, 10**d - 1)


def split_of(task: str, canonical_prompt: str) -> str:
    # blake2b rather than hash(): Python's str hash is salted per process.
    digest = hashlib.blake2b(f"{task}\0{canonical_prompt}".encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "big") % 100 < HELDOUT_PERCENT else "train"


@dataclass(frozen=True)
class Sample:
    task: str
    split: str
    index: int
    prompt: str
    answer: str  # one reference answer; `Task.verify` is the judge, not string equality with this


class Task:
    """A family of verifiable prompts. Subclasses set the class attributes and implement
    `generate` and `check`; knobs (difficulty) are constructor arguments."""

    name: str
    description: str
    why_parallel_is_hard: str
    stop: tuple[str, ...] = ()   # stop strings an eval decodes with unless it sets its own (orl.engine.stops)
    # another family whose problems this one poses in another format: its draws and train/held-out split are that
    # family's (same seeds, same canonical problem), so a problem held out in one is held out in both
    draws_as: str | None = None

    def generate(self, rng: random.Random) -> tuple[str, str]:
        """Draw one (prompt, reference answer) pair, ignoring splits."""
        raise NotImplementedError

    def check(self, prompt: str, output: str) -> bool:
        """Judge an output that has already had trailing whitespace stripped."""
        raise NotImplementedError

    def canonical(self, prompt: str) -> str:
        return prompt

    def split_of(self, prompt: str) -> str:
        return split_of(self.draws_as or self.name, self.canonical(prompt))

    def generate_beyond(self, rng: random.Random) -> tuple[str, str]:
        """Draw one pair at a size outside the training range (the `beyond` split)."""
        raise ValueError(f"task {self.name!r} has no {BEYOND!r} split; length-varied families (e.g. "
                         f"long7) have one")

    def sample(self, split: str, index: int) -> Sample:
        """Deterministic in (name, split, index): the rng is seeded from those alone (str seeds are
        hashed with sha512, stable across processes and platforms); `draws_as`'s name when set."""
        if split not in SPLITS + (BEYOND,):
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS + (BEYOND,)}")
        rng = random.Random(f"{self.draws_as or self.name}|{split}|{index}")
        if split == BEYOND:
            return Sample(self.name, split, index, *self.generate_beyond(rng))
        for _ in range(MAX_DRAWS):
            prompt, answer = self.generate(rng)
            if self.split_of(prompt) == split:
                return Sample(self.name, split, index, prompt, answer)
        raise RuntimeError(f"task {self.name!r}: no {split} prompt in {MAX_DRAWS} draws; are the knobs too narrow?")

    def verify(self, prompt: str, output: str) -> bool:
        """True iff the model output (decoded, without EOS) answers the prompt."""
        return self.check(prompt, output.rstrip())

    def reward(self, prompt: str, output: str) -> float:
        """Credit in [0, 1] for a model output (decoded, without EOS). Pass/fail unless a family gives
        partial credit by overriding this; ORL keeps rollouts whose reward reaches
        ORLConfig.keep_reward (docs/TASKS.md), evaluation reports `verify`."""
        return float(self.verify(prompt, output))
