"""Registry of verifiable synthetic task families for tiny character-level dLLMs.

Every family generates (prompt, reference answer) pairs deterministically from (family, split, index)
and judges model outputs with its own verifier; see each module's docstring for its format and why its
answer tokens depend on each other. Prompts and answers use only CharTokenizer characters; answers fit
one 16-token block with EOS (<= 15 characters) except `prog` (one or two) and `long` (three).

`SUITE` is what "all" means (`orl eval --tasks all`, the demo, the pretraining and ORL defaults): the
five families the shipped base was trained on. `SUITE_V5` has the single-answer `add` and `sort` in
place of the multi-answer `split` and `keysort`: a trained base commits single-answer families almost
at once, which leaves post-training no room (docs/TRAINING.md). `add` and `sort` stay in the registry
for the checkpoints and records made with them.
"""
from __future__ import annotations

from collections.abc import Iterable

from .arithmetic import Add
from .base import SPLITS, Sample, Task
from .constraints import Constr
from .keysort import KeySort
from .long import Long
from .programs import Prog, run_program
from .sorting import Sort
from .split import Split

__all__ = ["SPLITS", "SUITE", "SUITE_V5", "TASKS", "Sample", "Task", "get_task", "make_samples", "run_program",
           "task_names"]

TASKS: dict[str, Task] = {t.name: t for t in (Add(), Sort(), Prog(), Constr(), Long(), Split(), KeySort())}
SUITE = ("split", "keysort", "prog", "constr", "long")
SUITE_V5 = ("add", "sort", "prog", "constr", "long")

# make_samples gives each seed its own range of indices, so seeds never share a sample.
SEED_STRIDE = 1 << 32


def task_names() -> list[str]:
    """The families "all" stands for."""
    return list(SUITE)


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


def make_samples(names: str | Iterable[str], split: str, n: int, seed: int = 0) -> list[Sample]:
    """n samples cycling through the families in order (a, b, c, a, b, c, ...).

    names is "all", one task name, or an iterable of names. Sample i of family f has index
    seed * SEED_STRIDE + i // len(families), so `get_task(f).sample(split, index)` reproduces it.
    """
    if names == "all":
        names = task_names()
    elif isinstance(names, str):
        names = [names]
    tasks = [get_task(name) for name in names]
    if not tasks:
        raise ValueError("make_samples needs at least one task name")
    if not 0 <= seed < SEED_STRIDE or n < 0:
        raise ValueError(f"need n >= 0 and 0 <= seed < 2**32, got n={n}, seed={seed}")
    return [tasks[i % len(tasks)].sample(split, seed * SEED_STRIDE + i // len(tasks)) for i in range(n)]
