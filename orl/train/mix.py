"""Rows per task in each pretraining step: the fixed mix, or one that moves rows to the tasks that lag.

Why a moving mix: on hint4's AR stage (docs/TRAINING.md, "Session 28") the two hinted families are learned one
after the other, and which one comes first depends on the training seed; at the end of the budget the other is
often midway through its curve, and its beyond-range skill with it. `PretrainConfig.balance` names tasks that
share their rows: every step their summed count is split in proportion to mix_i x (task i's recent training
loss), so the family that lags gets the rows, and each keeps at least half its fixed count (a family already
learned still needs rows to keep what it knows). Every other task keeps its fixed count, and the step's total
is unchanged.

The recent loss is an exponential moving average of the per-task losses train_step already reports (no extra
device sync); it restarts when the stage changes (the diffusion loss is another scale), and it is saved with
the trainer state, so a resumed run draws the same rows as an uninterrupted one.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

EMA_DECAY = 0.98  # about 50 steps: follows a family's curve, smooths one step's draw of rows
FLOOR = 0.5       # the share of its fixed count a balanced task always keeps


def balanced_counts(mix: Sequence[int], members: Sequence[int], losses: Sequence[float]) -> tuple[int, ...]:
    """Rows per task: `members` (indices into mix) split their summed rows by mix_i x losses[i] (largest
    remainder, ties to the lower index), each keeping ceil(FLOOR x mix_i); the others keep mix_i."""
    counts = list(mix)
    floors = {i: math.ceil(FLOOR * mix[i]) for i in members}
    free = sum(mix[i] for i in members) - sum(floors.values())
    weights = {i: mix[i] * max(float(losses[i]), 0.0) for i in members}
    total = sum(weights.values())
    if not total > 0:  # every member at zero loss (or not a number): nothing to move rows towards
        return tuple(counts)
    shares = {i: free * w / total for i, w in weights.items()}
    given = {i: math.floor(s) for i, s in shares.items()}
    rest = max(0, free - sum(given.values()))
    for i in sorted(members, key=lambda i: (-(shares[i] - given[i]), i))[:rest]:
        given[i] += 1
    for i in members:
        counts[i] = floors[i] + given[i]
    return tuple(counts)


class MixBalancer:
    """The moving mix of one run: counts() before a step, update() with the step's per-task losses after it."""

    def __init__(self, mix: Sequence[int], members: Sequence[int]):
        self.mix, self.members = tuple(mix), tuple(members)
        self.stage: str | None = None
        self.ema: list[float] | None = None  # aligned with the tasks whose mix count is > 0

    def counts(self) -> tuple[int, ...]:
        if self.ema is None:
            return self.mix
        active = [i for i, n in enumerate(self.mix) if n > 0]
        losses = [0.0] * len(self.mix)
        for i, x in zip(active, self.ema):
            losses[i] = x
        return balanced_counts(self.mix, self.members, losses)

    def update(self, stage: str, losses: Sequence[float]) -> None:
        """losses: this step's mean loss of each task with a mix count > 0, in task order."""
        losses = [float(x) for x in losses]
        if stage != self.stage or self.ema is None:
            self.stage, self.ema = stage, losses
        else:
            self.ema = [EMA_DECAY * e + (1 - EMA_DECAY) * x for e, x in zip(self.ema, losses)]

    def state_dict(self) -> dict:
        return {"stage": self.stage, "ema": self.ema}

    def load_state_dict(self, state: dict) -> None:
        ema = state.get("ema")
        n_active = sum(n > 0 for n in self.mix)
        if ema is not None and len(ema) != n_active:
            raise ValueError(f"the saved mix balance has {len(ema)} task losses, this run trains {n_active} tasks")
        self.stage, self.ema = state.get("stage"), None if ema is None else [float(x) for x in ema]
