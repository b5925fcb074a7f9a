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
                    "long7xph", "long7xpo", "long7xpf", "prog7xph", "prog7xpf"})


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


def values_by(pairs: list[tuple[str, str]], value_cut: int, index_cut: int) -> dict[tuple[bool, bool], tuple[int, int]]:
    """Right values in the answers with the reference's skeleton, split two ways, since past the range both
    grow together: (element index >= index_cut, reference value >= value_cut) -> (right, total). The index
    counts from 1 (element k answers item k); a wrong value at a large index but a small value is lost
    alignment, at a small index but a large value an unseen number."""
    out: dict[tuple[bool, bool], list[int]] = {}
    for ref, got in pairs:
        if skeleton(ref) != skeleton(got):
            continue
        for k, (a, b) in enumerate(zip(_NUMBER.findall(ref), _NUMBER.findall(got)), start=1):
            cell = out.setdefault((k >= index_cut, int(a) >= value_cut), [0, 0])
            cell[0] += a == b
            cell[1] += 1
    return {key: (r, t) for key, (r, t) in sorted(out.items())}
