"""Registry of verifiable synthetic task families for tiny character-level dLLMs.

Every family generates (prompt, reference answer) pairs deterministically from (family, split, index)
and judges model outputs with its own verifier; see each module's docstring for its format and why its
answer tokens depend on each other. Prompts and answers use only CharTokenizer characters; answers fit
one 16-token block with EOS (<= 15 characters) except `prog` (one or two) and `long` (three); the
length-varied v7 families and their helpers run to several blocks (up to 7 for long7 and long7h).

`SUITE` is what "all" means (`orl eval --tasks all`, the demo, the pretraining and ORL defaults): the
five families the shipped base was trained on. `SUITE_V5` has the single-answer `add` and `sort` in
place of the multi-answer `split` and `keysort`: a trained base commits single-answer families almost
at once, which leaves post-training no room (docs/TRAINING.md). `add` and `sort` stay in the registry
for the checkpoints and records made with them.

`SUITE_V7` is the length-varied suite (tasks v7): the same five families under new names (`split7`,
`keysort7`, `prog7`, `constr7`, `long7`) whose size is drawn from a range during training, and whose
`beyond` split draws sizes past that range (tasks/sized.py). New names rather than new defaults,
because the shipped checkpoints and their tests are bound to the fixed-size families above; a name
fixes a family's prompts for good. "Size" is, per family:
    long7     digits in the string            4-20  (beyond 21-28)
    keysort7  records, letters from a-l        3-9   (beyond 10-12)
    prog7     assignments                      2-7   (beyond 8-10)
    constr7   letters in the word (`ends`)     3-8   (beyond 9-12)
    split7    digits of N, not zero-padded     2-5   (beyond 6-7)
The longest answers (long7 at 28 digits: up to 99 characters + EOS, 7 blocks of 16) need
`--max-new-tokens 112` and a context of 192 (presets/pretrain.py tiny_model7).

`HELPERS` (long7h, split7h, keysort7h, prog7h, constr7h; tasks/helpers.py) are one training-only helper
per v7 family, drawn at sizes past that family's range, for length generalisation by association.

`V7X` (long7x, prog7x, long7xp, prog7xp; tasks/hinted.py) are long7 and prog7 with index hints: a unique
marker per item that the answer repeats (the `xp` ones with the answer's first marker closing the prompt),
the v7 ranges and beyond splits; `HINT_HELPERS` (tasks/hint_helpers.py: prog7xph, long7xph for lengths;
long7xpo for the sums past 100 that long7xp's beyond split needs; long7xpf and prog7xpf for varied distances) are the
`xp` families' helpers. `V7XC` (split7xp, constr7xp, keysort7x; tasks/hinted_choice.py) does the same for the
three multi-answer families: marked digits, slot markers instead of a count, the records' keys in the answer;
constr7xq is constr7xp's problems with the end letters keyed by slot marker (session 45; `draws_as`: constr7xp's
draws and split). `CHOICE_HELPERS` (tasks/hint_choice_helpers.py: split7xph, split7xps, split7xpc, constr7xph,
constr7xpe, keysort7xh, constr7xqh) are their helpers.
"""
from __future__ import annotations

from collections.abc import Iterable

from .arithmetic import Add
from .base import BEYOND, SPLITS, Sample, Task
from .constraints import Constr
from .fewshot import SHOT_NAME, FewShot
from .helpers import HELPERS
from .hint_choice_helpers import CHOICE_HELPERS
from .hint_helpers import HELPER_NAMES, HINT_HELPERS
from .hinted import LongHints, ProgFresh
from .hinted_choice import ConstrHints, ConstrKeyed, KeysortHints, SplitHints
from .keysort import KEYSORT7_LETTERS, KeySort
from .long import Long
from .programs import Prog, run_program
from .sorting import Sort
from .sized import Sized
from .split import Split

__all__ = ["BEYOND", "CHOICE_HELPERS", "HELPER_NAMES", "HELPERS", "HINT_HELPERS", "SPLITS", "SUITE", "SUITE_V5", "SUITE_V7", "TASKS", "Sample", "Task", "get_task", "make_samples", "run_program",
           "task_names", "trained_tasks"]

V7 = (
    Sized("split7", Split(2, 5, pad=False), Split(6, 7, pad=False), (2, 5), (6, 7), "digits of N"),
    Sized("keysort7", KeySort(3, 9, letters=KEYSORT7_LETTERS), KeySort(10, 12, letters=KEYSORT7_LETTERS),
          (3, 9), (10, 12), "records"),
    Sized("prog7", Prog(2, 7), Prog(8, 10), (2, 7), (8, 10), "assignments"),
    Sized("constr7", Constr(min_word=3, max_word=8), Constr(min_word=9, max_word=12), (3, 8), (9, 12), "letters"),
    Sized("long7", Long(4, 20), Long(21, 28), (4, 20), (21, 28), "digits"),
)
# Index-hinted long7 and prog7 (tasks/hinted.py): the same ranges and beyond splits, another format;
# the `p` versions end the prompt with the answer's first marker.
V7X = (
    Sized("long7x", LongHints(4, 20), LongHints(21, 28), (4, 20), (21, 28), "digits"),
    Sized("prog7x", ProgFresh(2, 7), ProgFresh(8, 10), (2, 7), (8, 10), "assignments"),
    Sized("long7xp", LongHints(4, 20, True), LongHints(21, 28, True), (4, 20), (21, 28), "digits"),
    Sized("prog7xp", ProgFresh(2, 7, True), ProgFresh(8, 10, True), (2, 7), (8, 10), "assignments"),
)
# Index-hinted split7, constr7 and keysort7 (tasks/hinted_choice.py): the v7 ranges and beyond splits, another format.
V7XC = (
    Sized("split7xp", SplitHints(2, 5), SplitHints(6, 7), (2, 5), (6, 7), "digits of N"),
    Sized("constr7xp", ConstrHints(3, 8), ConstrHints(9, 12), (3, 8), (9, 12), "letters"),
    # constr7xp's problems under keyed ends: its draws and split, so both formats hold out the same problems
    Sized("constr7xq", ConstrKeyed(3, 8), ConstrKeyed(9, 12), (3, 8), (9, 12), "letters", draws_as="constr7xp"),
    Sized("keysort7x", KeysortHints(3, 9, KEYSORT7_LETTERS), KeysortHints(10, 12, KEYSORT7_LETTERS), (3, 9), (10, 12),
          "records"),
)
TASKS: dict[str, Task] = {t.name: t for t in (Add(), Sort(), Prog(), Constr(), Long(), Split(), KeySort(), *V7, *V7X,
                                              *V7XC, *HELPERS, *HINT_HELPERS, *CHOICE_HELPERS)}
SUITE = ("split", "keysort", "prog", "constr", "long")
SUITE_V5 = ("add", "sort", "prog", "constr", "long")
SUITE_V7 = tuple(t.name for t in V7)

# make_samples gives each seed its own range of indices, so seeds never share a sample.
SEED_STRIDE = 1 << 32


def task_names() -> list[str]:
    """The families "all" stands for."""
    return list(SUITE)


def trained_tasks(manifest: dict) -> tuple[str, ...]:
    """The task families a checkpoint was trained on (its manifest's recipe: a pretrain's tasks, a
    conversion's task-text stream corpus.tasks), else SUITE: post-training rolls out on the base's own
    tasks unless told otherwise, without the helper families."""
    config = (manifest.get("recipe") or {}).get("config") or {}
    tasks = config.get("tasks") or (config.get("corpus") or {}).get("tasks")
    # helpers (tasks/helpers.py, tasks/hint_helpers.py) are training only, k-shot ones too: no rollouts, no
    # held-out means
    tasks = [t for t in tasks or () if t.split(":")[0] not in HELPER_NAMES]
    return tuple(tasks) if tasks else SUITE


def get_task(name: str) -> Task:
    """A registered family, or "<family>:<k>shot" for it with k solved examples before each prompt (fewshot.py)."""
    if name not in TASKS and (m := SHOT_NAME.fullmatch(name)) and m["family"] in TASKS:
        return FewShot(TASKS[m["family"]], int(m["k"]))
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}, each also as '<task>:<k>shot' "
                         f"(k solved examples first; a task of your own is registered "
                         "with --task-module FILE.py or --tasks-file FILE.jsonl; docs/TASKS.md)") from None


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
