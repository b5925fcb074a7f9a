"""Checkers for tasks given as data (tasks/datafile.py): how one row judges a model output.

    exact         the output is one of the row's answers (trailing whitespace stripped from both)
    numeric       the output is a decimal number within `tolerance` (default 0) of one of the answers, in exact
                  decimal arithmetic (no float rounding: with tolerance 0, 10000000000000 is not 10000000000001)
    regex         the output matches the row's `pattern` in full (Python `re.fullmatch`)
    python_tests  the row's prompt + the output (the output alone with "include_prompt": false), followed
                  by one of the row's `tests`, runs in orl.eval.sandbox as humaneval's programs do; a
                  test passes iff its program exits 0 within `timeout_s`. Verdict: every test passes;
                  reward: the fraction of tests that pass (partial credit).

Every checker sees the output with trailing whitespace stripped, as every family's verifier does.
Numbers are strict decimals ("12", "-0.5", "1e3"): no "nan", "inf", "1_000" or surrounding spaces.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, ROUND_CEILING, ROUND_FLOOR, Context, Decimal, InvalidOperation

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


def within(output: str, answer: str, tolerance: float) -> bool:
    """|output - answer| <= tolerance, exactly: the output is compared (exactly, as Decimal) with the interval
    [answer - tolerance, answer + tolerance], whose ends are rounded outwards only past 10,000 digits. An exponent
    past Decimal's range (10**18) is no number here."""
    try:
        x, a, tol = Decimal(output), Decimal(answer), Decimal(repr(tolerance))  # repr: 0.3, not 0.2999999999999999889
    except InvalidOperation:
        return False
    low = Context(prec=10_000, rounding=ROUND_FLOOR, Emax=MAX_EMAX, Emin=MIN_EMIN).subtract(a, tol)
    high = Context(prec=10_000, rounding=ROUND_CEILING, Emax=MAX_EMAX, Emin=MIN_EMIN).add(a, tol)
    return low <= x <= high


def passes(row: Row, output: str) -> bool:
    """The row's verdict on an output already stripped of trailing whitespace."""
    if row.checker == "exact":
        # the output arrives with its trailing whitespace stripped: so must a reference ("Paris\n") to match it
        return output in (a.rstrip() for a in row.answers)
    if row.checker == "numeric":
        return _NUMBER.fullmatch(output) is not None and any(within(output, a, row.tolerance) for a in row.answers)
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
