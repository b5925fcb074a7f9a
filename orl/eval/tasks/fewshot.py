"""k-shot prompts: a family asked the way a pretrained LM that never saw its format is asked.

`get_task("long7:3shot")` is `long7` with 3 solved examples from the train split before each prompt,
one per line ("prompt answer\\n"), so a model such as gemma-3-270m sees the format before it answers;
zero-shot, a pretrained LM answers "cumsum:91626=" with prose and scores 0 whatever it can do. The
output is judged up to its first newline (a base model goes on with the next example line). The shots
of a sample are fixed by (family, split, index), so the prompt is too; they come from the train split,
at training sizes for a length-varied family's `beyond` split as well. The wrapped name is the
family's name plus ":<k>shot", so records, tables and resumption keep k-shot and zero-shot apart.
Its `stop` is the newline, so an eval (and a rollout) ends the generation there instead of paying for
the next example line: TPF and tokens/s count what is judged.
"""
from __future__ import annotations

import random
import re

from .base import Sample, Task

SHOT_NAME = re.compile(r"(?P<family>.+):(?P<k>[0-9]+)shot")
MAX_SHOTS = 64


class FewShot(Task):
    stop = ("\n",)

    def __init__(self, inner: Task, k: int):
        if not 1 <= k <= MAX_SHOTS:
            raise ValueError(f"{inner.name}:{k}shot: the number of shots must be in 1..{MAX_SHOTS}, got {k}")
        self.inner, self.k = inner, k
        self.name = f"{inner.name}:{k}shot"
        self.description = f"{inner.description} ({k} solved train examples first, one per line)"
        self.why_parallel_is_hard = inner.why_parallel_is_hard

    def _line(self, text: str, what: str) -> str:
        if "\n" in text:
            raise ValueError(f"{self.name}: a {what} of {self.inner.name} holds a newline, so its k-shot prompt "
                             f"would be ambiguous: {text!r}")
        return text

    def sample(self, split: str, index: int) -> Sample:
        s = self.inner.sample(split, index)
        rng = random.Random(f"{self.name}|{split}|{index}")  # which train examples; stable across processes
        shots = [self.inner.sample("train", rng.randrange(1 << 40)) for _ in range(self.k)]
        prefix = "".join(self._line(t.prompt, "prompt") + self._line(t.answer, "answer") + "\n" for t in shots)
        return Sample(self.name, s.split, s.index, prefix + self._line(s.prompt, "prompt"), s.answer)

    @staticmethod
    def _parts(prompt: str, output: str) -> tuple[str, str]:
        return prompt.rsplit("\n", 1)[-1], output.split("\n", 1)[0]

    def verify(self, prompt: str, output: str) -> bool:
        return self.inner.verify(*self._parts(prompt, output))

    def reward(self, prompt: str, output: str) -> float:
        return self.inner.reward(*self._parts(prompt, output))

    def size(self, prompt: str) -> int:  # length tables (benchmarks/length_table.py --by-size)
        return self.inner.size(self._parts(prompt, "")[0])
