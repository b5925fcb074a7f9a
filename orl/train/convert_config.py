"""The convert recipe's one config (orl.train.convert) and its learning-rate schedule: warm-up, then cosine
to min_lr_frac over `steps`. Kept apart so presets and CLIs read it without the trainer's imports."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from orl.engine.layouts import LAYOUTS
from orl.train.corpus import STREAMS, CorpusConfig
from orl.train.draft_only import draft_only_problems
from orl.train.draft_rows import anchors
from orl.train.fsdp import check_parallel
from orl.train.loop import check_fields


@dataclass(frozen=True)
class ConvertConfig:
    base: str = ""                      # the AR checkpoint directory (`orl train --base`)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    data_dir: str = ""                  # where the corpus is built; empty: $ORL_CACHE/corpus/<key>
    block_len: int = 4
    layout: str = "absolute_grid"       # absolute_grid | prompt_block (module docstring)
    window: int = 160                   # tokens per row: `context` clean tokens, then answer blocks
    context: int = 32
    mix: tuple[int, ...] = (8, 0, 0)    # rows per step from the code / tasks / distill streams
    noisy_copies: int = 1
    ar_aux: float = 0.0                 # weight of a next-token loss on the same windows, causal (0: off)
    # weight of draft rows on the same windows (orl.train.draft_rows: m = draft_tokens masks after every
    # draft_stride-th answer cut, the fused self-draft's geometry; 0: off); they carry ar_aux's term too. A
    # weight in the step's one weighted mean, as ar_aux: each draft position counts draft_aux, a masked one 1
    draft_aux: float = 0.0
    draft_tokens: int = 3               # decode with the same spec_tokens (`--spec-tokens`, convert_eval --spec)
    draft_stride: int = 4
    # the drafts' targets: "text" (the window's next tokens) or "ar" (the model's own AR path's greedy token
    # at the same position, from a no-grad forward of the clean window: what its verifier will accept)
    draft_target: str = "text"
    steps: int = 1000
    lr: float = 2e-5
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    bf16: bool = True
    checkpointing: bool = True          # recompute each block's activations in backward
    freeze_embeddings: bool = False
    ce_chunk: int = 128                 # positions per head chunk: [ce_chunk, V] fp32 logits at most
    seed: int = 0
    eval_every: int = 100
    eval_windows: int = 16              # held-out windows of the periodic eval
    save_every: int = 50
    threads: int = 0
    mask_token: str = ""                # when the base's tokenizer has none (orl.train.convert_base)
    parallel: str = "ddp"               # under torchrun: ddp | fsdp (sharded weights and optimizer: orl.train.fsdp)
    # wall-clock budget of one invocation (0: none): past it the run saves and stops; rerunning continues.
    # The schedule stays the one over `steps` (a lease of fixed length: size `steps` to fit it)
    time_limit_s: float = 0.0
    # train only the noisy / draft rows; the base, frozen, runs the clean ones (orl.train.draft_only)
    draft_only: bool = False
    init_from: str = ""                 # draft_only: a converted checkpoint of the base to start the drafter from
    draft_rank: int = 0                 # draft_only: a rank-r delta on the base's linears instead of a full copy
                                        # (orl.train.draft_lora; 0: a full copy)
    RESUME_FREE: ClassVar[frozenset[str]] = frozenset({"data_dir", "eval_windows", "time_limit_s"})

    def __post_init__(self):
        problems = check_fields(self, positive=("block_len", "window", "context", "noisy_copies", "steps", "lr",
                                                "grad_clip", "ce_chunk", "eval_every", "eval_windows", "save_every",
                                                "draft_tokens", "draft_stride"),
                                non_negative=("warmup", "weight_decay", "threads", "time_limit_s", "ar_aux",
                                              "draft_aux", "draft_rank"))
        if self.context >= self.window or (self.window - self.context) % self.block_len:
            problems.append(f"window - context ({self.window} - {self.context}) must be a positive multiple of "
                            f"block_len ({self.block_len})")
        n_draft = (self.window + len(anchors(self.context, self.window, self.draft_stride)) * self.draft_tokens
                   if self.draft_aux > 0 and 0 < self.context < self.window and self.draft_stride > 0 else 0)
        if n_draft > 4 * self.window:
            problems.append(f"draft rows of {n_draft} tokens (window {self.window} + draft_tokens {self.draft_tokens} "
                            f"per {self.draft_stride}-th cut) exceed 4 x window: a [rows, N, N] mask each; raise "
                            f"draft_stride or lower draft_tokens")
        if self.draft_target not in ("text", "ar"):
            problems.append(f"draft_target must be 'text' or 'ar', got {self.draft_target!r}")
        if self.layout not in LAYOUTS:
            problems.append(f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
        elif self.layout == "absolute_grid" and self.context % self.block_len:
            problems.append(f"layout absolute_grid needs context ({self.context}) to be a multiple of block_len "
                            f"({self.block_len}): every answer block must be one block of the grid")
        if len(self.mix) != len(STREAMS) or min(self.mix) < 0 or sum(self.mix) == 0:
            problems.append(f"mix {self.mix} must give a row count >= 0 for each stream {STREAMS}")
        elif self.mix[1] and not self.corpus.tasks:
            problems.append("mix asks for task rows but corpus.tasks is empty")
        elif self.mix[2] and not self.corpus.distill_prompts:
            problems.append("mix asks for distill rows but corpus.distill_prompts is 0")
        if not 0.0 <= self.min_lr_frac <= 1.0:
            problems.append(f"min_lr_frac must be in [0, 1], got {self.min_lr_frac}")
        problems += check_parallel(self) + draft_only_problems(self)
        if problems:
            raise ValueError("invalid ConvertConfig: " + "; ".join(problems))

    @property
    def rows_per_step(self) -> int:
        return sum(self.mix)


def lr_at(cfg: ConvertConfig, step: int) -> float:
    warmup = min(cfg.warmup, cfg.steps // 10)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    frac = min((step - warmup) / max(1, cfg.steps - warmup), 1.0)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
