"""What Engine.run yields while a request decodes: one StepEvent per denoising step (streams with
steps on), one BlockEvent per committed block, then one DoneEvent. Each carries what its consumers
(the CLI, the demo, the server's streams) need, so none of them recomputes the block layout or the
forward count (a commit forward is counted apart only when it is not fused, DecodeConfig.fused_commit)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from orl.engine.sequence import Generation
from orl.engine.trace import StepRecord


@dataclass(frozen=True)
class StepEvent:
    """A denoising step of the request's first row (step streams carry one prompt)."""
    block: int
    record: StepRecord
    n_valid: int                  # positions of the block within max_new_tokens; the rest are padding
    forwards: int = 0             # the row's forwards so far, this step's included (prefill excluded)
    at: float = field(default_factory=time.perf_counter)  # when the engine produced it
    start: int = 0                # canvas index of the block's first answer position (absolute grid, block 0: the
                                  # prompt's tail comes first)

    @property
    def resolved(self) -> int:
        """Valid positions of the block resolved once this step has committed (EOS fill aside)."""
        r = self.record
        return int((r.committed | ~r.unresolved)[self.start: self.start + self.n_valid].sum())


@dataclass(frozen=True)
class BlockEvent:
    """A committed block: every row's tokens and text so far."""
    block: int
    n_valid: int
    token_ids: list[list[int]]
    text: list[str]
    forwards: int = 0             # the first row's forwards so far (steps, and commit forwards unless fused)
    at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class DoneEvent:
    generations: list[Generation]
    at: float = field(default_factory=time.perf_counter)


Event = StepEvent | BlockEvent | DoneEvent
