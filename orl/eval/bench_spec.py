"""`orl bench`'s settings (BenchSpec, checked before any system is built) and what a system is: a prompt in, an
Output out (orl.eval.bench runs them, orl.eval.bench_table prints them)."""
from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orl.eval.runner import MAX_DRAWS


@dataclass
class BenchSpec:
    base: str
    orl: str | None = None
    ar: str | None = None
    tasks: list[str] = field(default_factory=lambda: ["trained"])  # the base's (orl.eval.runner._tasks)
    split: str = "heldout"
    limit: int = 20                  # samples per task
    threshold: float = 0.9           # commit threshold of (a), (b) and (d)
    max_new_tokens: int = 64
    ref_steps: int = 0               # (c): steps over all blocks; 0 = one token per step
    chunk_steps: int = 1             # dlmrt: denoising steps between host checks
    ar_chunk_steps: int = 1          # (e): decode steps between host EOS checks (a chunk decodes past EOS:
                                     # on CPU a check is free, so 1; larger on GPU to keep syncs out)
    compile: bool = False            # torch.compile the steps of dlmrt and of (e) ((g) runs eagerly)
    ar_spec_tokens: int = 10         # (g), (h): drafted tokens per verify (0: no (g), (h)); Saxena's and
                                     # transformers' example value
    ar_spec_ngram: int = 2           # (g), (h): longest n-gram looked up (transformers' default)
    self_spec_tokens: int = 0        # (i), (j): drafted tokens per round of the base's self-speculation (0: off)
    self_spec_groups: int = 3        # (k): (j) with this many draft groups a round (0: no (k))
    drafter: str | None = None       # (l): a draft-only checkpoint (orl.train.draft_only), beside its recorded verifier
    device: str = "cpu"
    seed: int = 0
    out: str | None = None

    def validate(self) -> "BenchSpec":
        problems = []
        if self.limit <= 0 or self.max_new_tokens <= 0 or self.ref_steps < 0:
            problems.append(f"limit and max_new_tokens must be > 0 and ref_steps >= 0, got "
                            f"{self.limit}, {self.max_new_tokens}, {self.ref_steps}")
        if self.limit > MAX_DRAWS:  # the samples are built before the first system runs
            problems.append(f"limit must be <= {MAX_DRAWS:,} per task, got {self.limit}")
        if not 0.0 < self.threshold <= 1.0:
            problems.append(f"threshold must be in (0, 1], got {self.threshold}")
        if self.chunk_steps <= 0 or self.ar_chunk_steps <= 0:
            problems.append("chunk_steps and ar_chunk_steps must be > 0")
        if self.self_spec_tokens < 0 or self.self_spec_groups < 0:
            problems.append(f"self_spec_tokens and self_spec_groups must be >= 0, got {self.self_spec_tokens}, "
                            f"{self.self_spec_groups}")
        if self.ar_spec_tokens < 0 or self.ar_spec_ngram < 1:
            problems.append(f"ar_spec_tokens must be >= 0 and ar_spec_ngram >= 1, got {self.ar_spec_tokens}, "
                            f"{self.ar_spec_ngram}")
        if self.drafter and (bad := drafter_problem(self)):
            problems.append(bad)
        if self.out and (bad := _out_problem(Path(self.out))):
            problems.append(bad)
        if problems:
            raise ValueError("invalid bench settings: " + "; ".join(problems))
        return self


def drafter_problem(spec: BenchSpec) -> str | None:
    """--drafter is checked before any system is built: it needs drafts a round, and a recorded verifier."""
    from orl.checkpoint import read_manifest, recorded_verifier

    if not spec.self_spec_tokens:
        return f"--drafter {spec.drafter} needs --self-spec-tokens K (the tokens it drafts a round, e.g. 8)"
    try:
        manifest = read_manifest(spec.drafter)
    except (OSError, ValueError) as e:
        return f"--drafter {spec.drafter}: {e}"
    if not recorded_verifier(manifest):
        return (f"--drafter {spec.drafter} records no verifier (orl.json recipe.verifier): give a draft-only "
                "checkpoint (orl train --recipe draft --set draft_only=true, or a draft-only conversion); a "
                "block-diffusion base drafts for itself in (i)-(k)")
    return None


def _out_problem(out: Path) -> str | None:
    """--out is checked before the benchmark runs (a run of minutes, lost if the write fails at the end)
    and the table is appended only to a markdown file: never to a weight file, source file or directory."""
    if out.suffix.lower() not in (".md", ".markdown"):
        return f"--out {out} must be a markdown file (.md) the table is appended to"
    if out.is_dir():
        return f"--out {out} is a directory; give a markdown file"
    if out.exists():
        with open(out, "rb") as f:
            head = f.read(1 << 20)
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError:
            head = b"\0"
        if b"\0" in head:
            return f"--out {out} exists and is not a text file; the table is not appended to it"
    return None


@dataclass
class Output:
    token_ids: list[int]   # up to and including the first EOS
    text: str
    forwards: int          # denoising + commit forwards (prefill excluded); AR: one per token; speculative: verifies
    total_s: float
    finished: bool         # ended with EOS (the last token id)


System = Callable[[str], Output]
