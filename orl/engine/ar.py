"""Autoregressive decoding of the native Transformer under a causal mask, gpt-fast style: the AR
peer that dlmrt is measured against, on the same model code, cache and timing discipline.

- Static buffers: one preallocated KVCache (model.new_cache) and output buffer per batch size,
  reused by every request; the next slot (cache.length), positions and the attention mask are
  device tensors built inside the step, so a compiled step has one shape for every request.
  The cache holds what the request needs (prompt + max_new_tokens, rounded up to a power of two:
  request_cache_len), not the model's whole context (32k for Gemma 3: ~1.2 GB per row in fp32);
  a longer request regrows it, so the shapes (and compiled steps) stay few. The fused self-draft adds
  scratch slots past that (orl.engine.self_draft) in a state of its own.
- Prefill covers prompt[:-1]; every decode step feeds one token (first the prompt's last one) and
  yields one generated token. So every generated token costs exactly one decode forward and
  TPF = 1 by definition (DESIGN section 5), prefill counted separately as for dLLMs. With
  `spec_tokens` > 0, prompt-lookup speculative decoding (orl.engine.speculative) verifies drafts of
  several tokens per forward instead, at batch 1, with the same tokens.
- Greedy or Gumbel-max sampling with counter-based noise (orl.engine.sampling.hash_uniform): no
  generator state, no multinomial, no host sync; a row's samples depend only on its seed.
- EOS is checked on the host once per chunk of `chunk_steps` steps; rows that finished inside a
  chunk keep emitting EOS, and those extra tokens are discarded. Their cost stays in the wall time.
  Stop strings (ARConfig.stop, orl.engine.stops) are checked at the same point, on the chunk's tokens.
- Batches are left padded (orl.model.padding): pad keys are invisible and RoPE positions start at
  each row's first real token, as in training rows and transformers' generate with an attention mask.
"""
from __future__ import annotations

from typing import Iterator

import torch

from orl.engine.ar_step import SELF_DRAFTS, ARConfig, ARState, ar_step, next_tokens
from orl.engine.config import UnsupportedSetting
from orl.engine.events import BlockEvent, DoneEvent, Event
from orl.engine.loaded import LoadedModel
from orl.engine.request import Clock, check_request, encode_prompts, request_cache_len
from orl.engine.sequence import Generation
from orl.engine.self_draft import check_self_draft
from orl.engine.speculative import run_speculative
from orl.engine.stops import RowStops, Stops
from orl.model.masks import see_self_if_blind
from orl.model.model import Transformer
from orl.model.padding import left_pad

__all__ = ["ARConfig", "ARDecoder", "ARState", "ar_step", "next_tokens"]


class ARDecoder(LoadedModel):
    objective = "autoregressive"
    verifies_drafts = True  # self-speculative rounds mark their draft rows (orl.engine.self_draft)

    def __init__(self, model: Transformer, tokenizer, max_len: int | None = None, manifest: dict | None = None):
        if tokenizer.eos_id is None:
            raise ValueError("the tokenizer has no EOS token; AR decoding needs one to stop")
        super().__init__(model, tokenizer, max_len, manifest)
        self.eos_id = tokenizer.eos_id
        self.eos_ids = tuple(getattr(tokenizer, "eos_ids", None) or (self.eos_id,))  # every id that stops a row
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else tokenizer.eos_id
        self._states: dict[tuple[int, bool], ARState] = {}  # (batch, with scratch slots) -> buffers
        self._compiled = None

    def state(self, batch: int, need: int = 1, extra: int = 0) -> ARState:
        """The buffers of this batch size, with room for `need` tokens (grown when a request needs more)
        and `extra` scratch cache slots after them: storage only, no positions, so they may pass the
        model's context (the fused self-draft's groups, orl.engine.self_draft). States with scratch are
        kept apart, so a fused request never leaves a larger cache behind for plain decoding to attend over."""
        key = (batch, extra > 0)
        st = self._states.pop(key, None)
        if st is None or st.cache.max_len < need + extra:
            st = None  # the smaller buffers are freed before the larger ones are allocated
            dev, V = self.device, self.model.args.vocab_size
            S = request_cache_len(need, self.max_len) + extra

            def z(*shape, dtype=torch.long):
                return torch.zeros(*shape, dtype=dtype, device=dev)

            st = ARState(
                cache=self.model.new_cache(batch, S), pad=z(batch), token=z(batch), out=z(batch, S), step=z(()),
                done=z(batch, dtype=torch.bool), seed=z(batch),
                banned=torch.arange(V, device=dev) >= self.tokenizer.vocab_size)
        self._states[key] = st
        return st

    @torch.no_grad()
    def setup(self, prompt_ids: list[list[int]], cfg: ARConfig, seeds: list[int] | None = None,
              extra: int = 0) -> ARState:
        """Check the request (cfg already validated), fill the buffers of this batch size and prefill
        prompt[:-1] (left padded). extra: cache slots the decoder needs beyond prompt + answer."""
        n = cfg.max_new_tokens
        P, seeds = check_request(prompt_ids, n, f"max_new_tokens ({n})", self.max_len, seeds, cfg.seed)
        dev = self.device
        st = self.state(len(prompt_ids), P + n, extra)
        tokens, pad = left_pad(prompt_ids, self.pad_id)
        tokens = tokens.to(dev)
        st.pad.copy_(pad)
        st.seed.copy_(torch.tensor(seeds, dtype=torch.long))
        st.done.zero_()
        st.step.zero_()
        st.cache.length.fill_(P - 1)
        st.token.copy_(tokens[:, -1])
        if P > 1:
            slots = torch.arange(P - 1, device=dev)
            keys = torch.arange(st.cache.max_len, device=dev)
            mask = (keys[None, None] <= slots[None, :, None]) & (keys >= st.pad[:, None])[:, None]  # [B, P-1, S]
            pos = (slots[None] - st.pad[:, None]).clamp(min=0)
            self.model(tokens[:, :-1], pos, see_self_if_blind(mask), cache=st.cache, slots=slots)
        return st

    def _step_fn(self, cfg: ARConfig):
        if not cfg.compile:
            return ar_step
        if self._compiled is None:
            self._compiled = torch.compile(ar_step, fullgraph=True, dynamic=False)
        return self._compiled

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def check(self, cfg: ARConfig | None, trace: bool = False) -> ARConfig:
        """cfg validated and checked against this checkpoint (ValueError naming the problem), with no work
        done: run() starts with it, the server calls it before queueing."""
        cfg = (cfg or ARConfig()).validate()
        if trace:  # the web page's step stream shows denoising steps; an AR decode has none
            raise UnsupportedSetting("autoregressive decoding has no denoising steps to trace or stream as steps: "
                                     "stream its tokens with /v1/completions (stream: true) instead")
        if cfg.spec_draft in SELF_DRAFTS:
            check_self_draft(self.model, getattr(self.tokenizer, "mask_id", None), self.manifest.get("objective"),
                             cfg.spec_draft)
        return cfg

    def generate(self, prompts: str | list[str], cfg: ARConfig | None = None, *,
                 seeds: list[int] | None = None) -> list[Generation]:
        return self.generate_ids(encode_prompts(self.tokenizer, prompts), cfg, seeds=seeds)

    def generate_ids(self, prompt_ids: list[list[int]], cfg: ARConfig | None = None, *,
                     seeds: list[int] | None = None) -> list[Generation]:
        # no BlockEvents: their token read-back and text decoding would be timed host work nobody reads
        for event in self._run(prompt_ids, self.check(cfg), seeds, emit=False):
            if isinstance(event, DoneEvent):
                return event.generations
        raise AssertionError("ARDecoder.run ended without a DoneEvent")

    def run(self, prompt_ids: list[list[int]], cfg: ARConfig | None = None, *, trace: bool = False,
            seeds: list[int] | None = None, step_events: bool = False) -> Iterator[Event]:
        """Engine.run's events for the server and the CLI: a BlockEvent per chunk of chunk_steps decode steps
        (per verify round when speculative) with every row's tokens and text so far, then a DoneEvent."""
        yield from self._run(prompt_ids, self.check(cfg, trace), seeds, emit=True)

    @torch.no_grad()
    def _run(self, prompt_ids: list[list[int]], cfg: ARConfig, seeds: list[int] | None,
             emit: bool) -> Iterator[Event]:
        """run() and generate_ids(), cfg checked (check)."""
        if cfg.spec_tokens:
            yield from run_speculative(self, prompt_ids, cfg, seeds, emit)
            return
        clock = Clock(self.device)
        st = self.setup(prompt_ids, cfg, seeds)
        prefill_s = clock()
        step = self._step_fn(cfg)
        B, P = len(prompt_ids), max(len(p) for p in prompt_ids)
        done_at: list[float | None] = [None] * B
        stops = RowStops(Stops(self.tokenizer, cfg.stop), B, {self.eos_id, *self.eos_ids})
        n_steps, chunk = 0, 0
        while n_steps < cfg.max_new_tokens:
            k = min(cfg.chunk_steps, cfg.max_new_tokens - n_steps)
            for _ in range(k):
                step(self.model, st, cfg.temperature, self.eos_id, self.eos_ids)
            n_steps += k
            done = st.done.tolist()  # the one host sync per chunk
            if stops.stops:  # the same sync point reads the chunk's tokens back for the stop strings
                for b in stops.add(st.out[:, n_steps - k:n_steps].tolist()):
                    st.done[b] = True  # a host write, not a read: the steps stay sync-free
                done = [d or h is not None for d, h in zip(done, stops.hits)]
            now = clock()
            done_at = [t if t is not None or not d else now for t, d in zip(done_at, done)]
            if emit:
                rows = [self._cut(ids, hit)[0] for ids, hit in zip(st.out[:, :n_steps].tolist(), stops.hits)]
                # text: what a stream may show, without a tail that may still become a stop string (Stops.visible);
                # forwards: the first row's, one per token it kept (as its Generation counts them)
                yield BlockEvent(chunk, k, rows, [stops.stops.visible(ids, hit) for ids, hit in zip(rows, stops.hits)],
                                 len(rows[0]))
            chunk += 1
            if all(done):
                break
        out = st.out[:, :n_steps].tolist()
        end = clock()
        gens = []
        for b in range(B):
            hit = stops.hits[b]
            ids, finished = self._cut(out[b], hit)
            gens.append(Generation(
                prompt_ids=list(prompt_ids[b]), token_ids=ids, text=hit.text if hit else self.tokenizer.decode(ids),
                finished=finished, prefill_forwards=int(P > 1), step_forwards=len(ids), commit_forwards=0,
                prefill_s=prefill_s, total_s=done_at[b] if done_at[b] is not None else end, stop=hit and hit.stop))
        yield DoneEvent(gens)

    def _cut(self, ids: list[int], hit) -> tuple[list[int], bool]:
        """A row's decoded tokens cut at its stop string (hit: orl.engine.stops) or its first EOS (kept)
        -> (tokens, finished)."""
        if hit is not None:
            return ids[: hit.n_tokens], True
        eos_at = next((i for i, t in enumerate(ids) if t in self.eos_ids or t == self.eos_id), None)
        return (ids, False) if eos_at is None else (ids[: eos_at + 1], True)
