"""A request's rows: `Row` while the engine decodes it (nano-vllm's Sequence), `Generation` when done."""
from __future__ import annotations

from dataclasses import dataclass, field

from orl.engine.stops import StopHit, Stops
from orl.engine.trace import StepRecord


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int]          # generated tokens up to and including the first EOS (or a stop string's last token)
    text: str                     # decoded, without EOS; ends before the stop string when one ended the row
    finished: bool                # stopped at EOS or a stop string (False: max_new_tokens reached)
    prefill_forwards: int
    step_forwards: int            # one per denoising step (dLLM) or decode step (AR)
    commit_forwards: int          # one per finished block before the last (dLLM); 0 for AR
    prefill_s: float
    total_s: float                # request start -> this row's last token
    block_steps: list[int] = field(default_factory=list)
    trace: list[StepRecord] | None = None
    stop: str | None = None       # the stop string (orl.engine.stops) that ended the row, if one did

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def forwards(self) -> int:
        return self.step_forwards + self.commit_forwards

    @property
    def tpf(self) -> float:
        """DESIGN section 5: tokens up to and including EOS / (denoising + commit forwards)."""
        return self.n_tokens / max(self.forwards, 1)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.total_s if self.total_s > 0 else 0.0


@dataclass
class Row:
    """The host-side state of one prompt between blocks; the device-side state of every row lives in
    the batch's DecodeState. A finished row stays in the batch as a predicated no-op."""
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    finished: bool = False        # committed an EOS: it takes part in no further block
    step_forwards: int = 0
    commit_forwards: int = 0
    block_steps: list[int] = field(default_factory=list)
    done_at: float = 0.0          # request start -> this row's last token
    stops: Stops | None = None    # the request's stop strings (orl.engine.stops)
    stop_hit: StopHit | None = None

    @property
    def forwards(self) -> int:
        """Forwards of the blocks added so far (prefill excluded)."""
        return self.step_forwards + self.commit_forwards

    def add_block(self, tokens: list[int], steps: int, eos_id: int | tuple[int, ...], now: float, last: bool) -> None:
        """A resolved block: its tokens within max_new_tokens, cut after the first EOS (eos_id: one id or several),
        and its steps. last: the request's final block (the row is done even without EOS). A stop string
        completed in the block (before its EOS) ends the row at the token that completed it."""
        self.step_forwards += steps
        self.block_steps.append(steps)
        eos = {eos_id} if isinstance(eos_id, int) else set(eos_id)
        end = next((i for i, t in enumerate(tokens) if t in eos), None)
        if end is not None:
            tokens = tokens[: end + 1]
            self.finished = True
        checked = len(self.token_ids)
        self.token_ids.extend(tokens)
        if self.stops and (hit := self.stops.find(self.token_ids, checked)) is not None:
            del self.token_ids[hit.n_tokens:]
            self.stop_hit, self.finished = hit, True
        if self.finished or last:
            self.done_at = now

    def text(self, tokenizer) -> str:
        """The text so far as a stream may show it (orl.engine.stops.Stops.visible)."""
        return self.stops.visible(self.token_ids, self.stop_hit) if self.stops else tokenizer.decode(self.token_ids)

    def generation(self, tokenizer, prefill_s: float, trace: list[StepRecord] | None = None) -> Generation:
        hit = self.stop_hit
        return Generation(prompt_ids=list(self.prompt_ids), token_ids=self.token_ids,
                          text=hit.text if hit else tokenizer.decode(self.token_ids), finished=self.finished,
                          prefill_forwards=1, step_forwards=self.step_forwards, commit_forwards=self.commit_forwards,
                          prefill_s=prefill_s, total_s=self.done_at, block_steps=self.block_steps, trace=trace,
                          stop=hit.stop if hit else None)
