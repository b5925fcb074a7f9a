"""The tiny base recipe's one config (orl.train.pretrain): an AR stage, then block diffusion (or more AR for
the AR peer), and its learning-rate schedule, restarted per stage. Kept apart so presets read it without the
trainer's imports."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from orl.engine.layouts import LAYOUTS
from orl.eval.tasks import SUITE
from orl.model.args import ModelArgs
from orl.train.fsdp import check_parallel
from orl.train.loop import check_fields
from orl.train.mix import balance_problems


@dataclass(frozen=True)
class PretrainConfig:
    model: ModelArgs = field(default_factory=ModelArgs)
    tasks: tuple[str, ...] = SUITE
    block_len: int = 16
    ar_steps: int = 1000          # stage 1: causal LM
    diffusion_steps: int = 1000   # stage 2: block diffusion (or more AR when convert is False)
    convert: bool = True          # False: stage 2 stays autoregressive - the AR peer on the same data and schedule
    stage2_lr: float = 0.0        # peak lr of stage 2 (0: same as lr); the conversion starts from trained weights
    ar_aux: float = 0.0           # stage 2: weight of a next-token loss on the same samples (keeps the AR skills)
    layout: str = "prompt_block"  # stage 2 rows and the engine: prompt_block (the prompt one bidirectional
                                  # block) | absolute_grid (block-causal from position 0, so a prompt's first
                                  # blocks read as in any shorter prompt, as in the causal stage 1)
    batch_size: int = 64          # samples per step, split evenly over tasks unless `mix` is given
    mix: tuple[int, ...] = ()     # samples per step of each task (aligned with `tasks`)
    balance: tuple[str, ...] = () # tasks that share their rows by recent loss: each keeps half its count, the
                                  # rest goes mostly to the one that lags (orl.train.mix); () keeps the mix fixed
    noisy_copies: int = 1         # noisy states of every block per row (clean context reused)
    pos_offset: float = 0.0       # fraction of rows shifted to a random start (trains the whole learned
                                  # position table, for answers longer than the training ones)
    pos_stretch: float = 0.0      # fraction of rows given gapped RoPE positions (stretch_positions: longer
    pos_stretch_max: float = 2.0  # distances at the training lengths), each row's stretch in [1, this]
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    bf16: bool = True
    seed: int = 0
    eval_every: int = 250
    eval_samples: int = 40        # held-out samples per family for the periodic eval
    eval_max_new_tokens: int = 64  # answer budget of the periodic eval (long7 needs 80)
    save_every: int = 250
    keep_every: int = 0           # also keep the checkpoint of every this many steps as OUT-atSTEP beside OUT
                                  # (0: none), to choose one on validation records (orl/eval/select.py)
    threads: int = 0              # torch threads; 0 keeps torch's default
    parallel: str = "ddp"         # under torchrun: ddp | fsdp (sharded weights and optimizer: orl.train.fsdp)
    init: str = ""                # start from this checkpoint's weights (same ModelArgs) with a fresh optimizer and
                                  # schedule: a curriculum stage that adds tasks to a trained model ("": random init)

    def __post_init__(self):
        problems = check_fields(self, positive=("block_len", "batch_size", "noisy_copies", "lr", "eval_every",
                                                "eval_samples", "eval_max_new_tokens", "save_every", "grad_clip"),
                                non_negative=("ar_steps", "diffusion_steps", "stage2_lr", "ar_aux", "warmup",
                                              "weight_decay", "threads", "keep_every"))
        if not self.tasks:
            problems.append("tasks must name at least one task")
        if self.layout not in LAYOUTS:
            problems.append(f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
        if not 0.0 <= self.pos_offset <= 1.0:
            problems.append(f"pos_offset must be in [0, 1], got {self.pos_offset}")
        if not 0.0 <= self.pos_stretch <= 1.0:
            problems.append(f"pos_stretch must be in [0, 1], got {self.pos_stretch}")
        if not 1.0 <= self.pos_stretch_max <= 16.0:  # NaN fails too
            problems.append(f"pos_stretch_max must be in [1, 16], got {self.pos_stretch_max}")
        if self.pos_stretch > 0 and self.model.learned_pos:
            problems.append("pos_stretch needs RoPE only (model.learned_pos=false): stretched positions would "
                            "read rows of the learned position table that inference never uses")
        if self.pos_stretch > 0 and "sliding_attention" in (self.model.layer_types or ()):
            problems.append("pos_stretch with sliding-window layers: their masks are built from positions, so "
                            "stretched rows would see fewer keys there than inference does")
        if not 0.0 <= self.min_lr_frac <= 1.0:
            problems.append(f"min_lr_frac must be in [0, 1], got {self.min_lr_frac}")
        problems += check_parallel(self)
        if self.mix and (len(self.mix) != len(self.tasks) or min(self.mix) < 0 or sum(self.mix) == 0):
            problems.append(f"mix {self.mix} must give a count >= 0 for each of the tasks {self.tasks}")
        elif self.balance:
            problems += balance_problems(self.tasks, self.samples_per_task, self.balance)
        if problems:
            raise ValueError("invalid PretrainConfig: " + "; ".join(problems))

    @property
    def samples_per_task(self) -> tuple[int, ...]:
        if self.mix:
            return tuple(self.mix)
        n, r = divmod(self.batch_size, len(self.tasks))
        return tuple(n + (i < r) for i in range(len(self.tasks)))

    @property
    def total_steps(self) -> int:
        return self.ar_steps + self.diffusion_steps

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(cfg: PretrainConfig, step: int) -> float:
    """Warm-up then cosine, restarted at the start of each stage (the conversion is a new task)."""
    stage_start, stage_len = (0, cfg.ar_steps) if step < cfg.ar_steps else (cfg.ar_steps, cfg.diffusion_steps)
    peak = cfg.stage2_lr if step >= cfg.ar_steps and cfg.stage2_lr > 0 else cfg.lr
    s = step - stage_start
    # a shortened run (--set ar_steps=50) keeps a warm-up of at most a tenth of its stage
    warmup = max(1, min(cfg.warmup, stage_len // 10)) if cfg.warmup else 0
    if s < warmup:
        return peak * (s + 1) / warmup
    frac = (s - warmup) / max(1, stage_len - warmup)
    return peak * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
