"""Length-varied families: one task drawn at a range of sizes for training and held-out evaluation,
and at sizes beyond that range for the `beyond` split.

`Sized` wraps two instances of the same family that differ only in their size knobs: `inner` (the
training range; its `train`/`heldout` hash split applies as usual) and `outer` (sizes disjoint from the
training range). Verifiers recompute the answer from the prompt, so one verifier judges both.
"""
from __future__ import annotations

import random
import re

from .base import Task

def _match(pattern: str, prompt: str) -> re.Match:
    if (m := re.fullmatch(pattern, prompt)) is None:
        raise ValueError(f"not a prompt of this family: {prompt!r}")
    return m


# What "size" counts, read back from a prompt, per family (the unit names in the registry).
_SIZE = {
    "long": lambda p: len(re.fullmatch(r"cumsum:([0-9]+)=", p)[1]),
    "keysort": lambda p: p.count(",") + 1,
    "prog": lambda p: p.count("="),
    "constr": lambda p: int(p.split()[0]) if p[0].isdigit() else len(p.split()[1].rstrip(",")),
    "split": lambda p: len(p.split("=", 1)[1]),
    "long_hints": lambda p: len(_match(r"cumsum:((?:[a-zA-Z][1-9])+)=[a-zA-Z]?", p)[1]) // 2,  # marker-digit pairs
    "prog_fresh": lambda p: p.count("="),
    "split_hints": lambda p: len(_match(r"\?\+\?=((?:[a-zA-Z][0-9])+):[a-zA-Z]", p)[1]) // 2,  # N's marked digits
    "constr_hints": lambda p: len(_match(r"([A-Z]+) of .*", p)[1]),  # slot markers
    "keysort_keys": lambda p: p.count(",") + 1,
}
_SIZE["constr_keyed"] = _SIZE["constr_hints"]  # the same slot run before " of "


class Sized(Task):
    def __init__(self, name: str, inner: Task, outer: Task, sizes: tuple[int, int], beyond: tuple[int, int],
                 unit: str, draws_as: str | None = None):
        if type(inner) is not type(outer):
            raise ValueError(f"{name}: inner and outer must be the same family, got {type(inner).__name__} "
                             f"and {type(outer).__name__}")
        if not (sizes[1] < beyond[0] or beyond[1] < sizes[0]):
            raise ValueError(f"{name}: beyond sizes {beyond} overlap the training sizes {sizes}")
        self.name, self.inner, self.outer, self.draws_as = name, inner, outer, draws_as
        self.sizes, self.beyond, self.unit = sizes, beyond, unit  # for docs and tests: what "size" counts
        self.description = f"{inner.name} at {sizes[0]}-{sizes[1]} {unit} (beyond: {beyond[0]}-{beyond[1]})"
        self.why_parallel_is_hard = inner.why_parallel_is_hard

    def size(self, prompt: str) -> int:
        """The prompt's size in `unit`s (for per-size tables)."""
        return _SIZE[self.inner.name](prompt)

    def generate(self, rng: random.Random) -> tuple[str, str]:
        return self.inner.generate(rng)

    def generate_beyond(self, rng: random.Random) -> tuple[str, str]:
        return self.outer.generate(rng)

    def canonical(self, prompt: str) -> str:
        return self.inner.canonical(prompt)

    def check(self, prompt: str, output: str) -> bool:
        return self.inner.check(prompt, output)

    def reward(self, prompt: str, output: str) -> float:
        return self.inner.reward(prompt, output)  # a family's partial credit, if it gives any
