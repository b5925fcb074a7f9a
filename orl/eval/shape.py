"""An answer's shape: right elements in the right order, whatever their values (length generalisation).

Beyond the training range a model can fail by length and alignment (too few elements, starting late) or by
values (a wrong sum). Exact match cannot tell the two apart; the skeleton can: every number replaced by '#',
so two answers have the same skeleton iff they have the same markers or variables, separators and number of
elements. Defined for the registered families whose answers are lists of numbers (`SHAPED`); a custom task
of any name is left out.
"""
from __future__ import annotations

import re

_NUMBER = re.compile(r"-?[0-9]+")


SHAPED = frozenset({"long", "prog", "long7", "prog7", "long7h", "prog7h", "long7x", "prog7x", "long7xp", "prog7xp",
                    "long7xph", "long7xpo", "prog7xph"})


def has_shape(task: str) -> bool:
    return task in SHAPED


def skeleton(text: str) -> str:
    return _NUMBER.sub("#", text)


def shape_counts(pairs: list[tuple[str, str]]) -> tuple[int, int, int]:
    """(reference, output) pairs -> (answers with the reference's skeleton, right values in those answers,
    values in those answers)."""
    shaped = [(ref, out) for ref, out in pairs if skeleton(ref) == skeleton(out)]
    right = sum(a == b for ref, out in shaped for a, b in zip(_NUMBER.findall(ref), _NUMBER.findall(out)))
    return len(shaped), right, sum(len(_NUMBER.findall(ref)) for ref, _ in shaped)
