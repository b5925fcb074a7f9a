"""Checkers for tasks given as data (tasks/datafile.py): how one row judges a model output.

    exact         the output is one of the row's answers
    numeric       the output is a decimal number within `tolerance` (default 0) of one of the answers
    regex         the output matches the row's `pattern` in full (Python `re.fullmatch`)
    python_tests  the row's prompt + the output (the output alone with "include_prompt": false), followed
                  by one of the row's `tests`, runs in orl.eval.sandbox as humaneval's programs do; a
                  test passes iff its program exits 0 within `timeout_s`. Verdict: every test passes;
                  reward: the fraction of tests that pass (partial credit).

Every checker sees the output with trailing whitespace stripped, as every family's verifier does.
Numbers are strict decimals ("12", "-0.5", "1e3"): no "nan", "inf", "1_000" or surrounding spaces.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from orl.eval.sandbox import Limits, run_many, run_python

CHECKERS = ("exact", "numeric", "regex", "python_tests")
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


@dataclass(frozen=True)
class Row:
    prompt: str
    answers: tuple[str, ...]           # references; the first is the row's Sample.answer
    checker: str
    split: str                         # "train" | "heldout"
    line: int                          # 1-based line in the data file, for error messages
    pattern: str = ""                  # regex
    tolerance: float = 0.0             # numeric: absolute tolerance
    tests: tuple[str, ...] = ()        # python_tests: one program each
    include_prompt: bool = True        # python_tests: the program starts with the prompt
    timeout_s: float = 10.0            # python_tests: wall time of one program
    stop: tuple[str, ...] = ()         # stop strings the task decodes with (every row of a file the same)

    def program(self, output: str, test: str) -> str:
        code = (self.prompt if self.include_prompt else "") + output
        return f"{code}\n\n{test}\n"


def parse_number(text: str) -> float | None:
    return float(text) if _NUMBER.fullmatch(text) else None


def passes(row: Row, output: str) -> bool:
    """The row's verdict on an output already stripped of trailing whitespace."""
    if row.checker == "exact":
        return output in row.answers
    if row.checker == "numeric":
        x = parse_number(output)
        return x is not None and any(math.isclose(x, float(a), rel_tol=1e-12, abs_tol=row.tolerance)
                                     for a in row.answers)
    if row.checker == "regex":
        return re.fullmatch(row.pattern, output) is not None
    if row.checker == "python_tests":
        # all tests in one program: one sandbox run when the answer is right
        return run_python(row.program(output, "\n".join(row.tests)), _limits(row)).passed
    raise ValueError(f"unknown checker {row.checker!r}; expected one of {CHECKERS}")


def credit(row: Row, output: str) -> float:
    """Reward in [0, 1]: the fraction of tests passed for python_tests, else 1.0 iff the verdict."""
    if row.checker != "python_tests":
        return float(passes(row, output))
    if passes(row, output):
        return 1.0
    if len(row.tests) == 1:
        return 0.0
    # each test on its own, so that one failing assertion does not hide the others' passes
    results = run_many([row.program(output, t) for t in row.tests], _limits(row))
    return sum(r.passed for r in results) / len(results)


def _limits(row: Row) -> Limits:
    return Limits(wall_s=row.timeout_s)
