"""A task given as data: a JSONL file of prompts with reference answers and a named checker.

One JSON object per line (blank lines are skipped):
    {"prompt": "7*6=", "answer": "42", "checker": "exact"}
    {"prompt": "half of 5:", "answer": "2.5", "checker": "numeric", "tolerance": 0.01}
    {"prompt": "a word:", "pattern": "[a-z]+", "checker": "regex"}
    {"prompt": "def inc(x):\n", "answer": "    return x + 1", "checker": "python_tests",
     "tests": ["assert inc(1) == 2", "assert inc(-1) == 0"], "split": "heldout"}
Fields: "prompt" (required); "answer" or "answers" (a list; exact and numeric need one, the others may
give one as the reference a pretraining run trains on); "checker" (default "exact"; tasks/checkers.py);
"split" ("train" | "heldout"; default: the stable hash every family uses, about 10% held out, see
tasks/base.py); "stop" (a string or a list: the stop strings an eval or a rollout decodes this task
with, e.g. "\n" for one-line answers; every row of a file gives the same or none); per checker "pattern", "tolerance", "tests", "include_prompt", "timeout_s"; "id" and
"meta" are kept out of the way for the user's own bookkeeping. Any other field is refused, so that a
typo ("anwser") is not silently ignored.

The task is named after the file ("qa.jsonl" -> "qa"), or NAME=PATH names it. The data is finite:
`sample(split, i)` is row i of that split, cycling (training draws random indices), and
`count(split)` tells evaluation how many distinct rows there are.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

from orl.engine.stops import as_stops, stop_problems

from .base import BEYOND, SPLITS, Sample, Task, split_of
from .checkers import CHECKERS, Row, credit, parse_number, passes

NAME = re.compile(r"[A-Za-z0-9_.-]+")  # no ',' (--tasks lists) and no '/' (record prompt ids)
FIELDS = {"prompt", "answer", "answers", "checker", "split", "pattern", "tolerance", "tests", "include_prompt",
          "timeout_s", "stop", "id", "meta"}
EXTRAS = {"exact": set(), "numeric": {"tolerance"}, "regex": {"pattern"},  # the fields only one checker reads
          "python_tests": {"tests", "include_prompt", "timeout_s"}}


class DataTask(Task):
    why_parallel_is_hard = "user data: see the file"

    def __init__(self, name: str, rows: list[Row], source: str):
        if not NAME.fullmatch(name):
            raise ValueError(f"task name {name!r} ({source}): use letters, digits, '_', '-' and '.' only")
        if not rows:
            raise ValueError(f"{source}: no rows; a data task needs at least one prompt")
        self.name, self.rows, self.source = name, rows, source
        stops = {r.stop for r in rows}
        if len(stops) > 1:
            raise ValueError(f"{source}: rows give different \"stop\" values {sorted(stops)}; a task decodes with "
                             "one set of stop strings")
        self.stop = stops.pop()
        self.by_prompt = {r.prompt: r for r in rows}
        self.splits = {s: [r for r in rows if r.split == s] for s in SPLITS}
        kinds = ", ".join(f"{c} {n}" for c in CHECKERS if (n := sum(r.checker == c for r in rows)))
        self.description = (f"rows of {source} ({kinds}); {len(self.splits['train'])} train, "
                            f"{len(self.splits['heldout'])} heldout")

    def count(self, split: str) -> int:
        return len(self.splits.get(split, ()))

    def generate(self, rng: random.Random) -> tuple[str, str]:
        row = rng.choice(self.rows)
        return row.prompt, _reference(row)

    def sample(self, split: str, index: int) -> Sample:
        if split not in SPLITS:
            extra = f"; {BEYOND!r} exists only for length-varied families" if split == BEYOND else ""
            raise ValueError(f"task {self.name!r} has splits {SPLITS}, not {split!r}{extra}")
        rows = self.splits[split]
        if not rows:
            raise ValueError(f"task {self.name!r} ({self.source}) has no {split!r} rows: the hash rule holds out "
                             f"about 10% of prompts; mark some rows with \"split\": \"{split}\"")
        row = rows[index % len(rows)]
        return Sample(self.name, split, index, row.prompt, _reference(row))

    def row(self, prompt: str) -> Row:
        try:
            return self.by_prompt[prompt]
        except KeyError:
            raise ValueError(f"not a prompt of task {self.name!r} ({self.source}): {prompt[:60]!r}") from None

    def check(self, prompt: str, output: str) -> bool:
        return passes(self.row(prompt), output)

    def reward(self, prompt: str, output: str) -> float:
        return credit(self.row(prompt), output.rstrip())


def _reference(row: Row) -> str:
    return row.answers[0] if row.answers else ""


def load_data_task(spec: str) -> DataTask:
    """spec: PATH or NAME=PATH of a JSONL file."""
    name, sep, path = spec.partition("=")
    if not sep or not NAME.fullmatch(name):  # a path that contains '=' and no name
        name, path = "", spec
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--tasks-file {spec}: no such file {str(path)!r}")
    name = name or path.name.split(".", 1)[0]
    rows, seen = [], {}
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{line_no}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{where}: not JSON ({e.msg})") from None
                row = parse_row(obj, line_no, name, where)
                if row.prompt in seen:
                    raise ValueError(f"{where}: repeats the prompt of line {seen[row.prompt]}; give several "
                                     "accepted answers as \"answers\": [...] in one row")
                seen[row.prompt] = line_no
                rows.append(row)
    except UnicodeDecodeError as e:  # the file named, not a bare codec message
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    return DataTask(name, rows, str(path))


def parse_row(obj, line: int, task: str, where: str) -> Row:
    """One validated row; every error names the file and line."""
    def bad(msg: str) -> ValueError:
        return ValueError(f"{where}: {msg}")

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    if unknown := sorted(set(obj) - FIELDS):
        raise bad(f"unknown field(s) {unknown}; known: {sorted(FIELDS)}")
    prompt, checker = obj.get("prompt"), obj.get("checker", "exact")
    if not isinstance(prompt, str) or not prompt:
        raise bad("\"prompt\" must be a non-empty string")
    if checker not in CHECKERS:
        raise bad(f"unknown checker {checker!r}; expected one of {CHECKERS}")
    if "answer" in obj and "answers" in obj:
        raise bad("give \"answer\" or \"answers\", not both")
    answers = [obj["answer"]] if "answer" in obj else obj.get("answers", [])
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise bad("\"answer\" must be a string and \"answers\" a list of strings")
    if checker in ("exact", "numeric") and not answers:
        raise bad(f"the {checker} checker needs \"answer\" or \"answers\"")
    if checker == "numeric" and (bad_nums := [a for a in answers if parse_number(a) is None]):
        raise bad(f"numeric answers must be decimal numbers, got {bad_nums}")
    split = obj.get("split") or split_of(task, prompt)
    if split not in SPLITS:
        raise bad(f"\"split\" must be one of {SPLITS}, got {split!r}")
    kw = {}
    if checker == "regex":
        pattern = obj.get("pattern")
        if not isinstance(pattern, str):
            raise bad("the regex checker needs \"pattern\" (a string)")
        try:
            re.compile(pattern)
        except re.error as e:
            raise bad(f"\"pattern\" is not a valid regular expression: {e}") from None
        kw["pattern"] = pattern
    if checker == "numeric":
        tol = obj.get("tolerance", 0.0)
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < float("inf"):
            raise bad(f"\"tolerance\" must be a number >= 0, got {tol!r}")
        kw["tolerance"] = float(tol)
    if checker == "python_tests":
        tests = obj.get("tests")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise bad("the python_tests checker needs \"tests\": a non-empty list of Python snippets")
        timeout = obj.get("timeout_s", 10.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise bad(f"\"timeout_s\" must be a number in (0, 600], got {timeout!r}")
        include = obj.get("include_prompt", True)
        if not isinstance(include, bool):
            raise bad(f"\"include_prompt\" must be true or false, got {include!r}")
        kw.update(tests=tuple(tests), timeout_s=float(timeout), include_prompt=include)
    if unused := sorted(set(obj) & set().union(*EXTRAS.values()) - EXTRAS[checker]):
        raise bad(f"field(s) {unused} do not apply to the {checker} checker")
    stop = as_stops(obj.get("stop"))
    if problems := stop_problems(stop):
        raise bad(f"\"stop\": {'; '.join(problems)}")
    return Row(prompt, tuple(answers), checker, split, line, stop=stop, **kw)
