"""dlmrt: the block-diffusion engine. The host loop here only sets up blocks and reads "done" once
per chunk of steps; every denoising step runs in orl.engine.decode on static buffers."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import torch

from orl.engine.config import DecodeConfig
from orl.engine.decode import DecodeState, denoise_step, prefill, prepare_block
from orl.engine.graph import ChunkRunner
from orl.engine.loaded import LoadedModel
from orl.engine.request import Clock, check_request, encode_prompts
from orl.engine.trace import StepRecord, TraceRecorder
from orl.model.model import Transformer
from orl.model.padding import left_pad
from orl.model.vocab import special_ids

MAX_STATES = 4


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int]          # generated tokens up to and including the first EOS
    text: str                     # decoded, without EOS
    finished: bool                # stopped at EOS (False: max_new_tokens reached)
    prefill_forwards: int
    step_forwards: int            # one per denoising step (dLLM) or decode step (AR)
    commit_forwards: int          # one per finished block before the last (dLLM); 0 for AR
    prefill_s: float
    total_s: float                # request start -> this row's last token
    block_steps: list[int] = field(default_factory=list)
    trace: list[StepRecord] | None = None

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


class Engine(LoadedModel):
    objective = "block_diffusion"

    def __init__(self, model: Transformer, tokenizer, max_len: int | None = None, manifest: dict | None = None):
        for name in ("mask_id", "eos_id", "pad_id"):
            if getattr(tokenizer, name, None) is None:
                raise ValueError(f"the tokenizer has no {name.replace('_id', '')} token; a dLLM engine needs mask, eos and pad ids")
        super().__init__(model, tokenizer, max_len, manifest)
        self.mask_id, self.eos_id, self.pad_id = tokenizer.mask_id, tokenizer.eos_id, tokenizer.pad_id
        self.ids = special_ids(tokenizer, model.args.vocab_size)
        self.runner = ChunkRunner(model, self.ids)
        self._states: OrderedDict[tuple[int, int], DecodeState] = OrderedDict()

    def state(self, batch: int, block_len: int) -> DecodeState:
        """Static buffers per (batch, block length), allocated once and reused by every request.
        Only the MAX_STATES most recently used shapes are kept: clients of a server pick block
        lengths, and each shape holds a whole KV cache (and, on GPU, its captured graphs)."""
        key = (batch, block_len)
        if key in self._states:
            self._states.move_to_end(key)
            return self._states[key]
        if len(self._states) >= MAX_STATES:
            _, old = self._states.popitem(last=False)
            self.runner.forget(old)
        self._states[key] = DecodeState.allocate(self.model, batch, self.max_len, block_len, self.ids)
        return self._states[key]

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def generate(self, prompts: str | list[str], cfg: DecodeConfig | None = None, *, trace: bool = False,
                 seeds: list[int] | None = None) -> list[Generation]:
        return self.generate_ids(encode_prompts(self.tokenizer, prompts), cfg, trace=trace, seeds=seeds)

    def generate_ids(self, prompt_ids: list[list[int]], cfg: DecodeConfig | None = None, *, trace: bool = False,
                     seeds: list[int] | None = None) -> list[Generation]:
        result = None
        for event in self.run(prompt_ids, cfg, trace=trace, seeds=seeds):
            if event["type"] == "done":
                result = event["generations"]
        return result

    def stream(self, prompt: str, cfg: DecodeConfig | None = None, *, steps: bool = False) -> Iterator[dict]:
        """Events of one request: {"type": "step"} per denoising step (when steps=True), {"type": "block"}
        per committed block, then {"type": "done", "generations": [...]}."""
        if not prompt:
            raise ValueError("prompt is empty; give at least one character")
        yield from self.run([self.encode(prompt)], cfg, trace=steps, step_events=steps)

    @torch.no_grad()
    def setup(self, prompt_ids: list[list[int]], cfg: DecodeConfig,
              seeds: list[int] | None = None) -> tuple[DecodeState, int]:
        """Check a request (cfg already validated), fill the static buffers of its batch shape and
        prefill the prompts (left padded to the longest). Returns the state and the padded prompt
        length P (the answer starts at slot P). Raises ValueError naming the problem before any
        forward runs."""
        L, n_blocks = cfg.block_len, cfg.n_blocks
        P, seeds = check_request(prompt_ids, n_blocks * L, f"{n_blocks} blocks of {L}", self.max_len, seeds, cfg.seed)
        st = self.state(len(prompt_ids), L)
        tokens, pad = left_pad(prompt_ids, self.pad_id)
        slot = torch.arange(self.max_len)
        st.valid.copy_((slot[None] >= pad[:, None]) & (slot[None] < P + cfg.max_new_tokens))
        st.pad.copy_(pad)
        st.prompt_end.fill_(P)
        st.global_step.zero_()
        st.seed.copy_(torch.tensor(seeds, dtype=torch.long))
        prefill(self.model, st, tokens.to(self.device))
        return st, P

    def begin_block(self, st: DecodeState, cfg: DecodeConfig, P: int, j: int, live: list[bool]) -> int:
        """Set up answer block j: canvas of mask tokens (pad beyond max_new_tokens), unresolved only
        for live rows, cold residual (z = 0, a = 0), step counters zeroed, and the block's attention
        mask / positions / slots, which its steps read. Returns its valid length."""
        L = cfg.block_len
        n_valid = min(L, cfg.max_new_tokens - j * L)
        dev = self.device
        st.start.fill_(P + j * L)
        in_block = torch.arange(L, device=dev) < n_valid
        live_t = torch.tensor(live, device=dev)
        st.canvas.copy_(torch.where(in_block, self.mask_id, self.pad_id).expand(st.canvas.shape))
        st.unresolved.copy_(in_block[None] & live_t[:, None])
        st.z.zero_()
        st.a.zero_()
        st.steps.zero_()
        prepare_block(st)
        return n_valid

    @torch.no_grad()
    def run(self, prompt_ids: list[list[int]], cfg: DecodeConfig | None = None, *, trace: bool = False,
            seeds: list[int] | None = None, step_events: bool = False) -> Iterator[dict]:
        cfg = (cfg or DecodeConfig()).validate()
        clock = Clock(self.device)
        st, P = self.setup(prompt_ids, cfg, seeds)
        B, n_blocks = len(prompt_ids), cfg.n_blocks
        prefill_s = clock()

        out_ids: list[list[int]] = [[] for _ in range(B)]
        finished, done_at = [False] * B, [0.0] * B
        denoise, commits = [0] * B, [0] * B
        block_steps: list[list[int]] = [[] for _ in range(B)]
        recorder = TraceRecorder(B, cfg.residual != "off") if trace else None
        for j in range(n_blocks):
            active_rows = [not f for f in finished]
            n_valid = self.begin_block(st, cfg, P, j, active_rows)
            while True:
                if recorder is not None:  # traces need every step's state, so one step per host check
                    recorder.before(st)
                    denoise_step(self.model, st, cfg, self.ids, record=True)
                    recorder.after(st, j)
                    done = not bool(st.unresolved.any())
                    if step_events:
                        yield {"type": "step", "block": j, "record": recorder.rows[0][-1]}
                else:
                    done = bool(self.runner(st, cfg))  # the one host sync per chunk
                if done:
                    break
            block = st.canvas[:, :n_valid].cpu().tolist()
            steps = st.steps.cpu().tolist()
            now = clock()
            for b in range(B):
                if not active_rows[b]:
                    continue
                denoise[b] += steps[b]
                block_steps[b].append(steps[b])
                toks = block[b]
                if self.eos_id in toks:
                    toks = toks[: toks.index(self.eos_id) + 1]
                    finished[b] = True
                out_ids[b].extend(toks)
                if finished[b] or j == n_blocks - 1:
                    done_at[b] = now
            yield {"type": "block", "block": j, "token_ids": [list(o) for o in out_ids],
                   "text": [self.tokenizer.decode(o) for o in out_ids]}
            if all(finished) or j == n_blocks - 1:
                break
            # commit forward: the resolved canvas writes the block's clean K/V (an all-resolved step),
            # compiled / captured like the steps
            self.runner.commit(st, cfg)
            for b in range(B):
                if not finished[b]:
                    commits[b] += 1
        gens = []
        for b in range(B):
            ids = out_ids[b]
            gens.append(Generation(
                prompt_ids=list(prompt_ids[b]), token_ids=ids, text=self.tokenizer.decode(ids),
                finished=finished[b], prefill_forwards=1, step_forwards=denoise[b], commit_forwards=commits[b],
                prefill_s=prefill_s, total_s=done_at[b], block_steps=block_steps[b],
                trace=recorder.rows[b] if recorder else None))
        yield {"type": "done", "generations": gens}
