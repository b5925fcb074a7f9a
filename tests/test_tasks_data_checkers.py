"""Data-file checkers (orl/eval/tasks/checkers.py): `numeric` accepts exactly the outputs within `tolerance` of an
answer (docs/TASKS.md), no hidden relative tolerance and no float rounding; `exact` accepts a reference answer
that ends in whitespace, since every checker sees the output with its trailing whitespace stripped."""
from __future__ import annotations

import pytest

from orl.eval.tasks.checkers import Row, passes
from orl.eval.tasks.datafile import parse_row


def numeric(answer: str, tolerance: float = 0.0) -> Row:
    return parse_row({"prompt": "n:", "answer": answer, "checker": "numeric", "tolerance": tolerance}, 1, "t", "t:1")


@pytest.mark.parametrize("answer, output", [
    ("10000000000001", "10000000000000"),      # 14 digits: isclose's rel_tol=1e-12 let the last digit be wrong
    ("123456789012345", "123456789012346"),
    ("9007199254740993", "9007199254740992"),  # one float apart from each other: equal as floats
    ("0.1000000000001", "0.1"),
])
def test_tolerance_0_rejects_a_different_number(answer, output):
    assert not passes(numeric(answer), output)


@pytest.mark.parametrize("answer, tolerance, output", [
    ("1", 0.3, "1.3"), ("1", 0.3, "0.7"),      # exactly `tolerance` away: within it
    ("2.5", 0.01, "2.49"), ("0.3", 0.1, "0.2"),
])
def test_an_output_exactly_tolerance_away_is_accepted(answer, tolerance, output):
    assert passes(numeric(answer, tolerance), output)


def test_numeric_still_accepts_equal_spellings_and_rejects_the_rest():
    for answer, output in [("1000", "1e3"), ("3.5", "3.50"), ("0", "-0"), ("0.5", ".5"), ("2.5", "25e-1")]:
        assert passes(numeric(answer), output), (answer, output)
    for output in ["1.31", "0.69", "nan", "inf", "1,0", " 1", "1e999999999", "-1e999999999", "1e-999999999",
                   "1e99999999999999999999"]:
        assert not passes(numeric("1", 0.3), output), output
    assert passes(numeric("1e999999999"), "10e999999998") and not passes(numeric("1e999999999"), "2e999999999")


def test_exact_reference_with_trailing_whitespace_verifies():
    row = parse_row({"prompt": "capital of France:", "answers": ["Paris\n", "paris "]}, 1, "t", "t:1")
    for output in ("Paris\n", "Paris", "paris ", "paris"):
        assert passes(row, output.rstrip()), output  # tasks judge outputs with trailing whitespace stripped
    assert not passes(row, "Pari") and not passes(row, " Paris")
