"""An answer's shape: right elements in the right order, whatever their values (length generalisation).

Beyond the training range a model can fail by length and alignment (too few elements, starting late) or by
values (a wrong sum). Exact match cannot tell the two apart; the skeleton can: every number replaced by '#',
so two answers have the same skeleton iff they have the same markers or variables, separators and number of
elements. Defined for the families whose elements are numbers (long*, prog*); for the `xp` families and their
helpers the answer's first marker closes the prompt and is put back first (orl/eval/tasks/hinted.py).
"""
from __future__ import annotations

import re

_NUMBER = re.compile(r"-?[0-9]+")


def has_shape(task: str) -> bool:
    return task.startswith(("long", "prog"))


def skeleton(task: str, prompt: str, text: str) -> str:
    return _NUMBER.sub("#", prompt[-1] + text if task.endswith(("xp", "xph")) else text)


def shape_counts(samples: list[tuple[str, str, str, str]]) -> tuple[int, int, int]:
    """(task, prompt, reference, output) -> (answers with the reference's skeleton, right values in those
    answers, values in those answers)."""
    shaped = [(ref, out) for task, prompt, ref, out in samples if skeleton(task, prompt, ref) == skeleton(task, prompt, out)]
    right = sum(a == b for ref, out in shaped for a, b in zip(_NUMBER.findall(ref), _NUMBER.findall(out)))
    return len(shaped), right, sum(len(_NUMBER.findall(ref)) for ref, _ in shaped)
