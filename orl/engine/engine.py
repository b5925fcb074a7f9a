"""dlmrt: the block-diffusion engine. The host loop here only sets up blocks and reads "done" once
per chunk of steps; every denoising step runs in orl.engine.decode on static buffers."""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterator

import torch

from orl.engine import full_sequence, layouts
from orl.engine.config import DecodeConfig, UnsupportedSetting
from orl.engine.decode import DecodeState, ar_first_token, block_closed, denoise_step, prepare_block
from orl.engine.events import BlockEvent, DoneEvent, Event, StepEvent
from orl.engine.graph import ChunkRunner
from orl.engine.loaded import LoadedModel
from orl.engine.request import Clock, check_request, encode_prompts, prefill_length
from orl.engine.request import request_cache_len as cache_length  # the AR decoder's buckets too: powers of two
from orl.engine.sequence import Generation, Row
from orl.engine.stops import Stops
from orl.engine.trace import TraceRecorder
from orl.model.kv_cache import check_budget
from orl.model.model import Transformer
from orl.model.padding import left_pad
from orl.model.vocab import special_ids

MAX_STATES = 4


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
        self._states: OrderedDict[tuple[int, int, int], DecodeState] = OrderedDict()

    def state(self, batch: int, block_len: int, cache_len: int) -> DecodeState:
        """Static buffers per (batch, block length, cache length), allocated once and reused by every
        request of that shape. cache_len is the request's bucket (`cache_length`), not max_len: a
        32k-context model would otherwise hold 32k K/V slots per row (19 GB for gemma-3-270m at batch
        16). Only the MAX_STATES most recently used shapes are kept: clients of a server pick block
        lengths, and each shape holds a whole KV cache (and, on GPU, its captured graphs). A state
        over the ORL_KV_CACHE_GIB budget is refused (CacheBudgetError) before anything is allocated."""
        key = (batch, block_len, cache_len)
        if key in self._states:
            self._states.move_to_end(key)
            return self._states[key]
        need = DecodeState.allocate(self.model, batch, cache_len, block_len, self.ids, device="meta")
        kv = sum(t.nbytes for t in need.cache.buffers_kv())
        check_budget(need.nbytes, f"decode state of batch {batch} x {cache_len} cache slots x block {block_len} "
                                  f"(KV cache {kv / 2**30:.3g} GiB of it)")
        if len(self._states) >= MAX_STATES:  # the evicted buffers are freed before the new ones are allocated
            _, old = self._states.popitem(last=False)
            self.runner.forget(old)
            del old
        self._states[key] = DecodeState.allocate(self.model, batch, cache_len, block_len, self.ids)
        return self._states[key]

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def generate(self, prompts: str | list[str], cfg: DecodeConfig | None = None, *, trace: bool = False,
                 seeds: list[int] | None = None) -> list[Generation]:
        return self.generate_ids(encode_prompts(self.tokenizer, prompts), cfg, trace=trace, seeds=seeds)

    def generate_ids(self, prompt_ids: list[list[int]], cfg: DecodeConfig | None = None, *, trace: bool = False,
                     seeds: list[int] | None = None) -> list[Generation]:
        for event in self.run(prompt_ids, cfg, trace=trace, seeds=seeds):
            if isinstance(event, DoneEvent):
                return event.generations
        raise AssertionError("Engine.run ended without a DoneEvent")

    def stream(self, prompt: str, cfg: DecodeConfig | None = None, *, steps: bool = False) -> Iterator[Event]:
        """Events of one request (orl.engine.events): a StepEvent per denoising step (when steps=True),
        a BlockEvent per committed block, then a DoneEvent."""
        if not prompt:
            raise ValueError("prompt is empty; give at least one character")
        yield from self.run([self.encode(prompt)], cfg, trace=steps, step_events=steps)

    @torch.no_grad()
    def setup(self, prompt_ids: list[list[int]], cfg: DecodeConfig,
              seeds: list[int] | None = None) -> tuple[DecodeState, int]:
        """Check a request (cfg already validated), fill the static buffers of its batch shape (the
        request's numbers too: st.knobs) and prefill the prompts (left padded to the longest; on a
        CUDA device further, to the prompt length bucket whose prefill graph serves it). Returns
        the state and the padded prompt length P (the answer starts at slot P). Raises ValueError
        naming the problem before any forward runs."""
        L = cfg.block_len
        plan = layouts.plan(prompt_ids, cfg.layout, L, cfg.max_new_tokens)  # where the blocks lie
        n_blocks = plan.n_blocks
        _, seeds = check_request(prompt_ids, n_blocks * L, f"{n_blocks} blocks of {L}", self.max_len, seeds, cfg.seed,
                                 first_slot=plan.P)  # the cache holds the prefill, then the canvases
        tokens, pad = left_pad(plan.prefill, self.pad_id)
        P = plan.P
        if cfg.cuda_graph or self.device.type == "cuda":
            # a length bucket: one prefill graph serves many prompt lengths; eager CUDA decodes use the
            # same buckets, so eager and captured runs have the same shapes (and the same roundings)
            bucket = prefill_length(P, n_blocks * L, self.max_len)
            if cfg.layout == "absolute_grid":  # whole blocks of padding keep the grid on the same slots
                bucket = -(-bucket // L) * L if -(-bucket // L) * L + n_blocks * L <= self.max_len else P
            tokens = torch.nn.functional.pad(tokens, (bucket - P, 0), value=self.pad_id)
            pad, plan.shift, P = pad + (bucket - P), bucket - P, bucket
        st = self.state(len(prompt_ids), L, cache_length(P + n_blocks * L, self.max_len))
        slot = torch.arange(st.cache.max_len)
        end = pad + torch.tensor(plan.lengths) + cfg.max_new_tokens  # each row's answer ends there
        st.valid.copy_((slot[None] >= pad[:, None]) & (slot[None] < end[:, None]))
        st.pad.copy_(pad)
        st.prompt_end.fill_(P)
        st.prompt_blocks.copy_(layouts.prompt_blocks(cfg.layout, st.cache.max_len, P, L, self.device))
        st.plan = plan
        st.global_step.zero_()
        st.seed.copy_(torch.tensor(seeds, dtype=torch.long))
        st.knobs.load(cfg)
        if P:
            self.runner.prefill(st, tokens.to(self.device), cfg)
        else:  # every prompt fits in the first canvas (absolute grid): nothing to prefill
            st.carry.zero_()
        return st, P

    def begin_block(self, st: DecodeState, cfg: DecodeConfig, P: int, j: int, live: list[bool],
                    fused: bool = False) -> int:
        """Set up answer block j: canvas of mask tokens (pad beyond max_new_tokens), unresolved only
        for live rows, cold residual (z = 0, a = 0), step counters zeroed, and the block's attention
        mask / positions / slots, which its steps read. fused (j > 0): keep block j - 1's resolved
        canvas as the clean half of the fused first step. Returns its valid length."""
        L = cfg.block_len
        spans = st.plan.block_span(j, L, cfg.max_new_tokens)  # per row, the canvas indices of its answer
        n_valid = max(hi - lo for lo, hi in spans)
        dev = self.device
        if fused:
            st.prev.copy_(st.canvas)
        st.start.fill_(P + j * L)
        ar = torch.arange(L)
        in_block = torch.stack([(ar >= lo) & (ar < hi) for lo, hi in spans]).to(dev)
        live_t = torch.tensor(live, device=dev)
        canvas = torch.where(in_block, self.mask_id, self.pad_id)
        if j == 0 and any(st.plan.tails):  # absolute grid: the prompt's partial block opens the canvas
            tail, fixed = layouts.first_canvas(st.plan, L, dev)
            canvas = torch.where(fixed, tail, canvas)
            st.fixed.copy_(fixed)
        else:
            st.fixed.zero_()
        st.canvas.copy_(canvas)
        st.unresolved.copy_(in_block & live_t[:, None])
        st.answer.copy_(in_block & live_t[:, None])
        st.open.copy_(st.answer.any(-1) if cfg.rule == "llada21" else torch.zeros_like(st.open))
        st.post.zero_()
        if cfg.rule == "fast_dllm_v2":  # its first token: greedy AR off the previous position (st.carry)
            ar_first_token(self.model, st, self.ids, cfg.eos_fill)
        st.z.zero_()
        st.a.zero_()
        st.steps.zero_()
        prepare_block(st, fused)
        return n_valid

    def check(self, cfg: DecodeConfig, trace: bool = False) -> DecodeConfig:
        """cfg validated and checked against this model and its layout's loop (ValueError naming the
        problem), with no work done: run() starts with it, the server calls it before queueing."""
        cfg = cfg.validate()
        if cfg.rule == "fast_dllm_v2" and not self.model.args.shift_logits:
            raise UnsupportedSetting("rule 'fast_dllm_v2' needs a shifted model (shift_logits: a block's first token "
                                     "is the previous position's prediction); this model reads each position off "
                                     "itself", "rule")
        if cfg.layout == "full_sequence":
            full_sequence.check(cfg, trace)
        return cfg

    @torch.no_grad()
    def run(self, prompt_ids: list[list[int]], cfg: DecodeConfig | None = None, *, trace: bool = False,
            seeds: list[int] | None = None, step_events: bool = False) -> Iterator[Event]:
        cfg = self.check(cfg or DecodeConfig(), trace)
        if cfg.layout == "full_sequence":  # bidirectional over the whole canvas, no cache: its own loop
            yield from full_sequence.run(self, prompt_ids, cfg, trace=trace, seeds=seeds)
            return
        clock = Clock(self.device)
        st, P = self.setup(prompt_ids, cfg, seeds)
        prefill_s = clock()
        stops = Stops(self.tokenizer, cfg.stop)
        rows = [Row(list(p), stops=stops) for p in prompt_ids]
        recorder = TraceRecorder(len(rows), cfg.residual != "off") if trace else None
        # each row's own last block (absolute grid: a shorter prompt tail ends the answer earlier); a row past it
        # is done, as after EOS: no steps, no commit forward, no empty block counted for it
        ends = st.plan.last_blocks(cfg.block_len, cfg.max_new_tokens)
        # Fast-dLLM v2 reads a block's first token off the previous block's commit forward before the
        # block's first step, so that forward cannot ride on the step
        fuse = cfg.fused_commit and cfg.rule != "fast_dllm_v2"
        for j in range(st.plan.n_blocks):
            live = [not r.finished and j <= e for r, e in zip(rows, ends)]
            # the commit forward of block j - 1 rides on block j's first step (fused), or ran alone below
            fused = fuse and j > 0
            n_valid = self.begin_block(st, cfg, P, j, live, fused)
            start = st.plan.block_span(j, cfg.block_len, cfg.max_new_tokens)[0][0] if step_events else 0
            # Fast-dLLM v2's AR first token can resolve a block (one answer position left, or an EOS under
            # eos_fill): no step for it (one host check per block, not per step)
            done = cfg.rule == "fast_dllm_v2" and bool(block_closed(st).all())
            while not done:
                if recorder is not None:  # traces need every step's state, so one step per host check
                    recorder.before(st)
                    denoise_step(self.model, st, cfg, self.ids, record=True, fused=fused)
                    recorder.after(st, j)
                    done = bool(block_closed(st).all())
                    if step_events:
                        rec = recorder.rows[0][-1]
                        yield StepEvent(j, rec, n_valid, rows[0].forwards + rec.step + 1, start=start)
                else:
                    done = bool(self.runner(st, cfg, fused))  # the one host sync per chunk
                fused = False
            canvas = st.canvas.cpu().tolist()
            block = [c[lo:hi] for c, (lo, hi) in zip(canvas, st.plan.block_span(j, cfg.block_len, cfg.max_new_tokens))]
            steps = st.steps.cpu().tolist()
            now = clock()
            for row, tokens, n, was_live, e in zip(rows, block, steps, live, ends):
                if was_live:
                    row.add_block(tokens, n, self.ids.eos_ids, now, last=j == e)
            yield BlockEvent(j, n_valid, [list(r.token_ids) for r in rows],
                             [r.text(self.tokenizer) for r in rows], rows[0].forwards)
            if all(r.finished or j >= e for r, e in zip(rows, ends)):  # j == last: every row is at its end
                break
            if fuse:
                continue  # the next block's first step writes this block's clean K/V (one forward)
            # commit forward: the resolved canvas writes the block's clean K/V (an all-resolved step),
            # compiled / captured like the steps
            self.runner.commit(st, cfg)
            for r, e in zip(rows, ends):
                if not r.finished and j < e:  # only rows with a block still to come need this block's K/V
                    r.commit_forwards += 1
        yield DoneEvent([r.generation(self.tokenizer, prefill_s, recorder.rows[b] if recorder else None)
                         for b, r in enumerate(rows)])
