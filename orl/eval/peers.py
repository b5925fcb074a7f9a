"""The plain decoders that dlmrt is measured against (`orl bench`, benchmarks/latency.py). Each returns
the generated token ids (up to and including the first EOS) and its forward count.

(a) `llada_reference`: the LLaDA reference sampler. No cache: every step recomputes the whole sequence
    [prompt, answer] (future blocks still masked) with one forward. Fixed schedule: the steps are split
    evenly over the blocks, each step unmasks a uniform number of positions (n // S, the first n % S
    steps one more), the most confident first; the low-confidence ones stay masked until later steps.
(b) `prefix_cache`: a Fast-dLLM style prefix-cache loop. At the start of every block one full forward
    over [prompt, committed blocks] rewrites the K/V cache; the block's steps then run on the block's
    tokens only, against that cache. Threshold rule (commit every masked position with p_max >= tau,
    at least the best one), and a host `.item()` check of "block done" after every step.
(c) `hf_generate`: an autoregressive model through transformers' own `generate` (greedy), optionally
    with its prompt-lookup speculative decoding (`prompt_lookup_num_tokens`).

(a) and (b) are written the obvious way, with Python loops and fresh tensors every step, on purpose:
they are the baselines, not the engine. Same semantics as the engine otherwise: batch 1, greedy, the
same banned ids (mask, pad, padded vocabulary rows) never win, and decoding stops at the end of the
block in which EOS was committed (LLaDA's own sampler would finish every block and cut afterwards;
stopping keeps the tokens/s comparison about the loops, not about wasted blocks). The model's
block-causal mask is used throughout, so every loop computes the same distribution for the current block.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from orl.model.masks import block_ids, visibility


@dataclass
class BaselineResult:
    token_ids: list[int]   # generated tokens up to and including the first EOS
    forwards: int          # denoising forwards + per-block refresh forwards (prefill excluded)
    prefill_s: float       # (b): the first refresh (over the prompt only); (a) has none
    total_s: float         # request start -> last token

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tpf(self) -> float:
        return self.n_tokens / max(self.forwards, 1)


def _sync(device: torch.device) -> None:
    # CUDA runs asynchronously: without this a timer would stop before the GPU has finished
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cut_at_eos(out: list[int], block: list[int], eos_id: int) -> bool:
    """Append block to out, up to and including a first EOS; True when EOS was found."""
    if eos_id in block:
        out.extend(block[: block.index(eos_id) + 1])
        return True
    out.extend(block)
    return False


def _start(model, prompt_ids: list[int], gen_len: int, mask_id: int) -> tuple[torch.device, float, int, Tensor]:
    """Start the clock (after queued device work) and lay out [prompt, gen_len masks] -> x [1, P + gen_len]."""
    dev = model.lm_head.weight.device
    _sync(dev)
    t0 = time.perf_counter()
    P = len(prompt_ids)
    x = torch.full((1, P + gen_len), mask_id, dtype=torch.long, device=dev)
    x[0, :P] = torch.tensor(prompt_ids, dtype=torch.long, device=dev)
    return dev, t0, P, x


def _greedy(logits: Tensor, banned: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """logits [n, V] -> (token, its probability) per position, banned ids excluded."""
    logits = logits.float().clone()
    logits[:, list(banned)] = float("-inf")
    p = torch.softmax(logits, dim=-1)
    conf, x = p.max(dim=-1)
    return x, conf


@torch.no_grad()
def llada_reference(model, prompt_ids: list[int], *, gen_len: int, block_len: int, steps: int,
                    mask_id: int, eos_id: int, banned: tuple[int, ...]) -> BaselineResult:
    """(a) full recompute every step, fixed uniform schedule (see the module docstring)."""
    n_blocks = -(-gen_len // block_len)
    if steps % n_blocks:
        raise ValueError(f"steps ({steps}) must be a multiple of the number of blocks ({n_blocks}), as in LLaDA")
    per_block = steps // n_blocks
    dev, t0, P, x = _start(model, prompt_ids, gen_len, mask_id)
    # the clean-sequence mask: bidirectional inside a block, causal across blocks; the current block
    # sees itself and the committed blocks, exactly what it sees in the engine
    blocks = block_ids(P, gen_len, block_len, device=dev)
    zero = torch.zeros_like(blocks)
    mask = visibility(blocks, zero, blocks, zero)[None]
    pos = torch.arange(P + gen_len, device=dev)[None]
    prev = (pos[0] - 1).clamp(min=0)  # the contiguous sequence: a shifted model reads t off t - 1
    out: list[int] = []
    forwards = 0
    for j in range(n_blocks):
        lo, hi = P + j * block_len, min(P + (j + 1) * block_len, P + gen_len)
        n = hi - lo
        counts = [n // per_block + (1 if s < n % per_block else 0) for s in range(per_block)]
        for s in range(per_block):
            logits = model(x, pos, mask, read_from=prev)[0, lo:hi]  # the whole sequence, every step
            forwards += 1
            if counts[s] == 0:
                continue  # LLaDA still runs the forward of a step that unmasks nothing
            tok, conf = _greedy(logits, banned)
            still_masked = x[0, lo:hi] == mask_id
            conf = torch.where(still_masked, conf, torch.full_like(conf, float("-inf")))
            idx = conf.topk(counts[s]).indices
            x[0, lo + idx] = tok[idx]
        if _cut_at_eos(out, x[0, lo:hi].tolist(), eos_id):
            break
    _sync(dev)
    return BaselineResult(out, forwards, 0.0, time.perf_counter() - t0)


class PrefixCache:
    """K/V of [prompt, committed blocks, current block] for one row. Duck-types the model's KVCache
    (the model only calls `update`) but returns exactly the first `end` slots, so attention reads the
    real context and no mask is needed."""

    def __init__(self, model, max_len: int):
        a, w = model.args, model.lm_head.weight
        shape = (a.n_layers, 1, a.n_kv_heads, max_len, a.head_dim)
        self.k = torch.zeros(shape, dtype=w.dtype, device=w.device)
        self.v = torch.zeros(shape, dtype=w.dtype, device=w.device)
        self.end = 0

    def update(self, layer: int, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))
        return self.k[layer, :, :, : self.end], self.v[layer, :, :, : self.end]


def _blocks(P: int, gen_len: int, block_len: int, layout: str, device) -> tuple[Tensor, list[tuple[int, int, int]]]:
    """Block id of every position of [prompt, answer] and, per block holding answer positions, (its first slot,
    its first answer slot, its end). prompt_block: the prompt is block 0. absolute_grid (orl.engine.layouts):
    block = position // block_len, so the first answer block starts with the prompt's partial last block."""
    if layout == "absolute_grid":
        first = P // block_len * block_len
        return (torch.arange(P + gen_len, device=device) // block_len,
                [(s, max(s, P), min(s + block_len, P + gen_len)) for s in range(first, P + gen_len, block_len)])
    if layout != "prompt_block":
        raise ValueError(f"the prefix-cache loop decodes the prompt_block and absolute_grid layouts, not {layout!r}")
    return (block_ids(P, gen_len, block_len, device=device),
            [(lo, lo, min(lo + block_len, P + gen_len)) for lo in range(P, P + gen_len, block_len)])


@torch.no_grad()
def prefix_cache(model, prompt_ids: list[int], *, gen_len: int, block_len: int, threshold: float,
                 mask_id: int, eos_id: int, banned: tuple[int, ...], layout: str = "prompt_block") -> BaselineResult:
    """(b) Fast-dLLM style: refresh the prefix cache once per block, then threshold steps on the block, in the
    checkpoint's layout (on the absolute grid a block's prompt tokens are fixed and seen like the rest of it)."""
    dev, t0, P, x = _start(model, prompt_ids, gen_len, mask_id)
    blocks, spans = _blocks(P, gen_len, block_len, layout, dev)
    pos = torch.arange(P + gen_len, device=dev)[None]
    cache = PrefixCache(model, P + gen_len)
    out: list[int] = []
    forwards, prefill_s = 0, 0.0
    last = torch.zeros(1, model.args.dim, dtype=model.lm_head.weight.dtype, device=dev)  # nothing before slot 0
    for j, (start, lo, hi) in enumerate(spans):
        # refresh: one forward over everything committed so far rewrites the cache with clean K/V (on the grid
        # none when the whole prompt lies in the first block)
        cache.end = start
        if start:
            zero = torch.zeros_like(blocks[:start])
            h = model(x[:, :start], pos[:, :start], visibility(blocks[:start], zero, blocks[:start], zero)[None],
                      cache=cache, slots=torch.arange(start, device=dev), return_hidden=True)
            last = h[:, -1]  # a shifted model reads the block's first token off the last committed position
        if j == 0:
            _sync(dev)
            prefill_s = time.perf_counter() - t0  # block 0's refresh is the prompt prefill
        else:
            forwards += 1
        # steps on the block only: it sees the whole prefix and itself
        cache.end = hi
        slots = torch.arange(start, hi, device=dev)
        see_all = torch.ones(1, hi - start, hi, dtype=torch.bool, device=dev)
        while (x[0, lo:hi] == mask_id).any().item():  # the host check, every step
            logits = model(x[:, start:hi], pos[:, start:hi], see_all, cache=cache, slots=slots, before=last)[0]
            forwards += 1
            tok, conf = _greedy(logits, banned)
            still_masked = x[0, start:hi] == mask_id
            still_masked[: lo - start] = False  # the prompt's tokens in the block (a prompt may hold a mask id)
            conf = torch.where(still_masked, conf, torch.full_like(conf, -1.0))
            commit = still_masked & (conf >= threshold)
            commit[conf.argmax()] = True  # at least the most confident masked position
            x[0, start:hi] = torch.where(commit, tok, x[0, start:hi])
        if _cut_at_eos(out, x[0, lo:hi].tolist(), eos_id):
            break
    _sync(dev)
    return BaselineResult(out, forwards, prefill_s, time.perf_counter() - t0)


@torch.no_grad()
def hf_generate(hf_model, prompt_ids: list[int], *, max_new_tokens: int, eos_id: int, pad_id: int,
                prompt_lookup: tuple[int, int] | None = None) -> BaselineResult:
    """(c) transformers' greedy `generate` at batch 1; prompt_lookup (k, n): with
    `prompt_lookup_num_tokens=k, max_matching_ngram_size=n`. forwards: the model's calls, counted by a
    hook. Its prefill forward yields the first token (with prompt lookup: also verifies the first draft),
    so plain greedy runs one forward per generated token, prefill included (TPF 1, as orl's AR)."""
    dev = hf_model.device
    calls = []
    hook = hf_model.register_forward_hook(lambda *_: calls.append(1))
    spec = {} if prompt_lookup is None else dict(prompt_lookup_num_tokens=prompt_lookup[0],
                                                 max_matching_ngram_size=prompt_lookup[1])
    _sync(dev)
    t0 = time.perf_counter()
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=dev)
    try:
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                do_sample=False, eos_token_id=eos_id, pad_token_id=pad_id, **spec)
    finally:
        hook.remove()
    _sync(dev)
    total = time.perf_counter() - t0
    toks: list[int] = []
    _cut_at_eos(toks, out[0, len(prompt_ids):].tolist(), eos_id)
    return BaselineResult(toks, len(calls), 0.0, total)
