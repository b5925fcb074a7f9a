"""Rows per task in each pretraining step: the fixed mix, or one that moves rows to the tasks that lag.

Why a moving mix: on hint4's AR stage (docs/TRAINING.md, "Session 28") the two hinted families are learned one
after the other, and which one comes first depends on the training seed; at the end of the budget the other is
often midway through its curve, and its beyond-range skill with it. `PretrainConfig.balance` names tasks that
share their rows: every step each keeps ceil(FLOOR x mix_i) (a family already learned still needs rows to keep
what it knows), and the rest of their summed count is split in proportion to mix_i x (task i's recent training
loss), so the family that lags gets it. With mix 12 / 12 and losses 1 : 3 that is 9 / 15 rows; at most 6 / 18.
Every other task keeps its fixed count, and the step's total is unchanged.

The recent loss is an exponential moving average of the per-task losses train_step already reports (no extra
device sync); it restarts when the stage changes (the diffusion loss is another scale), and it is saved with
the trainer state by task name, so a resumed run draws the same rows as an uninterrupted one.

A balanced run and a fixed-mix run of the same seed share their initial weights and their first step, not
their data: a step's samples come from one random stream in task order, so once a count moves, the draws of
the tasks after it move too. The counts follow float losses, so on a device whose arithmetic is not
deterministic two runs of one command may draw different rows.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

EMA_DECAY = 0.98  # about 50 steps: follows a family's curve, smooths one step's draw of rows
FLOOR = 0.5       # the share of its fixed count a balanced task always keeps


def movable_rows(mix: Sequence[int], members: Sequence[int]) -> int:
    return sum(mix[i] - math.ceil(FLOOR * mix[i]) for i in members)


def balance_problems(tasks: Sequence[str], mix: Sequence[int], balance: Sequence[str]) -> list[str]:
    """What is wrong with `balance` for these tasks and counts (PretrainConfig's check)."""
    counts = dict(zip(tasks, mix))
    problems = []
    unknown = [t for t in balance if t not in counts]
    twice = sorted({t for t in balance if list(balance).count(t) > 1})
    off = [t for t in balance if counts.get(t) == 0]
    if unknown:
        problems.append(f"balance names {', '.join(unknown)}, not among the tasks {tuple(tasks)}")
    if twice:
        problems.append(f"balance names {', '.join(twice)} twice")
    if off:
        problems.append(f"balance names {', '.join(off)}, which the mix gives no rows")
    if not problems and len(balance) < 2:
        problems.append(f"balance {tuple(balance)} must name two or more tasks (they share their rows)")
    elif not problems and movable_rows(mix, [list(tasks).index(t) for t in balance]) == 0:
        problems.append(f"balance {tuple(balance)} can move no rows: each keeps ceil({FLOOR} x its count) and "
                        "their counts leave nothing over; give them larger counts in the mix")
    return problems


def balanced_counts(mix: Sequence[int], members: Sequence[int], losses: Sequence[float]) -> tuple[int, ...]:
    """Rows per task: each of `members` (indices into mix) keeps ceil(FLOOR x mix_i), and the rest of their
    summed rows is split by mix_i x losses[i] (largest remainder, ties to the lower index); the others keep
    mix_i. Losses that are all zero, or any that is not finite, give the fixed mix."""
    if len(losses) != len(mix):
        raise ValueError(f"{len(losses)} losses for {len(mix)} tasks")
    weights = {i: mix[i] * max(float(losses[i]), 0.0) for i in members}
    total = sum(weights.values())
    if not (math.isfinite(total) and total > 0):
        return tuple(mix)
    free = movable_rows(mix, members)
    shares = {i: free * w / total for i, w in weights.items()}
    given = {i: math.floor(s) for i, s in shares.items()}
    rest = max(0, free - sum(given.values()))
    for i in sorted(members, key=lambda i: (-(shares[i] - given[i]), i))[:rest]:
        given[i] += 1
    counts = list(mix)
    for i in members:
        counts[i] = math.ceil(FLOOR * mix[i]) + given[i]
    return tuple(counts)


class MixBalancer:
    """The moving mix of one run: counts(stage) before a step, update(stage, losses) with its per-task losses after."""

    def __init__(self, tasks: Sequence[str], mix: Sequence[int], balance: Sequence[str]):
        if len(tasks) != len(mix):
            raise ValueError(f"{len(mix)} mix counts for {len(tasks)} tasks")
        self.mix, self.members = tuple(mix), tuple(tasks.index(t) for t in balance)
        self.active = [t for t, n in zip(tasks, mix) if n > 0]  # the tasks train_step reports a loss for
        self.tasks = tuple(tasks)
        self.stage: str | None = None
        self.ema: dict[str, float] | None = None

    def counts(self, stage: str) -> tuple[int, ...]:
        if self.ema is None or stage != self.stage:  # no loss of this stage seen yet
            return self.mix
        return balanced_counts(self.mix, self.members, [self.ema.get(t, 0.0) for t in self.tasks])

    def update(self, stage: str, losses: Sequence[float]) -> None:
        """losses: this step's mean loss of each task with a mix count > 0, in task order. A loss that is not
        finite leaves that task's average as it was."""
        if len(losses) != len(self.active):
            raise ValueError(f"{len(losses)} losses for the {len(self.active)} tasks with rows")
        new = dict(zip(self.active, map(float, losses)))
        if stage != self.stage or self.ema is None:
            self.stage, self.ema = stage, new
            return
        for t, x in new.items():
            e = self.ema[t]
            if math.isfinite(x):
                self.ema[t] = x if not math.isfinite(e) else EMA_DECAY * e + (1 - EMA_DECAY) * x

    def state_dict(self) -> dict:
        return {"stage": self.stage, "ema": self.ema}

    def load_state_dict(self, state: dict) -> str | None:
        """Restores the averages; returns why not (another task list: the averages restart) or None."""
        ema = state.get("ema")
        if ema is not None and sorted(ema) != sorted(self.active):
            return (f"the saved mix balance has averages for {', '.join(sorted(ema))}; this run trains "
                    f"{', '.join(self.active)}: the averages restart")
        self.stage, self.ema = state.get("stage"), None if ema is None else {t: float(x) for t, x in ema.items()}
        return None
