"""The device-side decode state and the per-step function of dlmrt (DESIGN section 3).

Everything here is pure tensor code on static buffers: no .item(), no .tolist(), no Python branch on
a tensor value, so `denoise_step` compiles with fullgraph=True and captures as a CUDA graph. Rows
whose block is finished are predicated no-ops: they still run the forward (static shapes) but their
state does not change. A step over a fully resolved block is exactly the block's commit forward.

What is constant within a block (attention mask, positions, cache slots) or a request (the banned
tokens, the rule's numbers in `knobs`) is built once, outside the steps, into buffers of the state: on
a CPU at batch 1 every op costs a few microseconds of dispatch, and rebuilding them every step made
the step ~1.13x its forward.

Fused commit forward (DecodeConfig.fused_commit): the first step of block k + 1 runs one forward over
2L tokens [clean block k | noisy block k + 1] under the staircase mask of training (the clean half
sees the cache and itself, the noisy half the clean blocks and itself). It writes block k's clean K/V
and block k + 1's noisy K/V, and returns block k + 1's logits, so the separate commit forward is
gone: one forward per block fewer, and a block decoded in one step costs one forward (TPF <= L).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from orl.engine.commit import commit_positions, llada21_edit_rule, rank_score
from orl.engine.config import DecodeConfig
from orl.engine.knobs import DeviceKnobs
from orl.engine.sampling import hash_uniform, select_tokens, top_k_top_p
from orl.model.kv_cache import KVCache
from orl.model.masks import see_self_if_blind, visibility
from orl.model.model import Transformer
from orl.model.residual import residual_state
from orl.model.vocab import SpecialIds, banned_mask, is_eos


@dataclass
class DecodeState:
    """Static buffers of one batch shape, allocated once and reused for every block and request."""
    cache: KVCache
    valid: Tensor        # [B, S] bool: key slot holds a real token (no left padding, within max_new)
    pad: Tensor          # [B] left padding of each row (RoPE position = slot - pad)
    prompt_end: Tensor   # [] slot where the first canvas starts (the padded prefill length)
    prompt_blocks: Tensor  # [S] block id of each prompt slot (orl.engine.layouts: 0, or the absolute grid's)
    start: Tensor        # [] first slot of the current block
    canvas: Tensor       # [B, L] current block tokens (mask token where unresolved)
    unresolved: Tensor   # [B, L] bool
    fixed: Tensor        # [B, L] bool: prompt tokens inside the canvas (the absolute grid's first block)
    answer: Tensor       # [B, L] bool: a live row's answer positions in the block (llada21: editable once committed)
    open: Tensor         # [B] bool: llada21 rule: the row's block still takes steps (masks left, or edit-only
                         #   post steps); False under every other rule, whose blocks end with their last mask
    post: Tensor         # [B] llada21 rule: edit-only steps begun since the block's last mask
    z: Tensor            # [B, L, D] soft embedding consumed by the next step
    a: Tensor            # [B, L] normalised entropy consumed by the next step (RCD mode)
    carry: Tensor        # [B, D] final hidden state of the last committed position (shifted read-out)
    steps: Tensor        # [B] denoising steps of the current block
    global_step: Tensor  # [B] denoising steps since the request started (noise counter)
    seed: Tensor         # [B] sampling seed of each row
    banned: Tensor       # [V] bool: ids that are never valid outputs (SpecialIds.banned), set at allocation
    knobs: DeviceKnobs   # the request's tau, temperature, factor, ... (loaded by Engine.setup)
    # per-block inputs of the step, written by `prepare_block` (constant while the block denoises)
    mask: Tensor         # [B, L, S] bool attention mask of the block's queries over the cache
    pos: Tensor          # [B, L] RoPE positions of the block
    slots: Tensor        # [L] cache slots of the block
    n_valid: Tensor      # [B] positions of the block within max_new_tokens (topk schedule)
    # inputs of the fused step, written by `prepare_block(fused=True)`: the previous block's clean
    # tokens and the mask / positions / slots of the 2L queries [clean block k | noisy block k + 1]
    prev: Tensor         # [B, L]
    fmask: Tensor        # [B, 2L, S] bool
    fpos: Tensor         # [B, 2L]
    fslots: Tensor       # [2L]
    # per-step outputs for traces, written only by steps with record=True
    last_x: Tensor       # [B, L] token proposed at every position
    last_conf: Tensor    # [B, L]
    last_entropy: Tensor  # [B, L]
    last_commit: Tensor  # [B, L] bool
    plan: Any = None     # the request's host-side layout plan (orl.engine.layouts.Plan), set by Engine.setup

    @classmethod
    def allocate(cls, model: Transformer, batch: int, cache_len: int, block_len: int, ids: SpecialIds,
                 device: torch.device | str | None = None) -> "DecodeState":
        """S = cache_len slots (the request's bucket, not the model's context). device 'meta': the shapes
        only, nothing allocated (the engine sizes a state with it before allocating)."""
        w = model.model.embed_tokens.weight
        dev, dt, D = device or w.device, w.dtype, model.args.dim

        def z(*shape, dtype=torch.long):
            return torch.zeros(*shape, dtype=dtype, device=dev)

        B, L, S = batch, block_len, cache_len
        return cls(cache=model.new_cache(B, S, device=dev), valid=z(B, S, dtype=torch.bool), pad=z(B),
                   prompt_end=z(()), prompt_blocks=z(S), start=z(()), canvas=z(B, L),
                   unresolved=z(B, L, dtype=torch.bool), fixed=z(B, L, dtype=torch.bool),
                   answer=z(B, L, dtype=torch.bool), open=z(B, dtype=torch.bool), post=z(B),
                   z=z(B, L, D, dtype=dt), a=z(B, L, dtype=dt), carry=z(B, D, dtype=dt),
                   steps=z(B), global_step=z(B), seed=z(B),
                   banned=banned_mask(model.args.vocab_size, ids.banned, dev), knobs=DeviceKnobs.allocate(dev),
                   mask=z(B, L, S, dtype=torch.bool), pos=z(B, L), slots=z(L), n_valid=z(B),
                   prev=z(B, L), fmask=z(B, 2 * L, S, dtype=torch.bool), fpos=z(B, 2 * L), fslots=z(2 * L),
                   last_x=z(B, L), last_conf=z(B, L, dtype=torch.float),
                   last_entropy=z(B, L, dtype=torch.float), last_commit=z(B, L, dtype=torch.bool))

    @property
    def block_len(self) -> int:
        return self.canvas.shape[1]

    def tensors(self) -> list[Tensor]:
        """Every buffer a step or prefill may write: the fields and the cache's K/V, positions, length."""
        return [v for f in fields(self) if isinstance(v := getattr(self, f.name), Tensor)] + list(self.cache.buffers())

    @property
    def nbytes(self) -> int:
        """Bytes of every buffer; of a state allocated on the meta device, what allocating it would take."""
        return sum(t.nbytes for t in self.tensors()) + sum(t.nbytes for t in vars(self.knobs).values())


def slot_meta(st: DecodeState) -> tuple[Tensor, Tensor]:
    """Block id and state id [S] of every cache slot, for the one mask rule of orl.model.masks.
    Prompt slots have the layout's block ids (0: the prompt block); the first canvas is block 1; the
    current block's slots hold its noisy state (state 1)."""
    S, L = st.cache.max_len, st.block_len
    slot = torch.arange(S, device=st.start.device)
    block = torch.where(slot < st.prompt_end, st.prompt_blocks, 1 + (slot - st.prompt_end).clamp(min=0) // L)
    state = ((slot >= st.start) & (slot < st.start + L)).long()
    return block, state


def prefill(model: Transformer, st: DecodeState, tokens: Tensor) -> None:
    """tokens [B, P] (left padded) -> K/V of the prompt in slots [0, P), and the last prompt position's
    state in st.carry: a shifted model reads the first answer token off it."""
    B, P = tokens.shape
    slots = torch.arange(P, device=tokens.device)
    k_block, _ = slot_meta(st)
    zeros_q = torch.zeros(P, dtype=torch.long, device=tokens.device)
    mask = visibility(k_block[:P], zeros_q, k_block, torch.zeros_like(k_block), st.valid)  # [B, P, S]
    pos = (slots[None] - st.pad[:, None]).clamp(min=0)
    h = model(tokens, pos, see_self_if_blind(mask), cache=st.cache, slots=slots, return_hidden=True)
    st.carry.copy_(h[:, -1])


def prepare_block(st: DecodeState, fused: bool = False) -> None:
    """Per-block inputs of the step for the block at st.start: attention mask, positions, slots,
    n_valid. They depend only on the slot layout, so they are built here once per block (the engine
    calls this after setting st.start) instead of in every step; written with copy_ into static
    buffers, so compiled steps and captured CUDA graphs, which read them by address, stay valid.
    fused: also the inputs of the fused step (the block before this one must be an answer block,
    its clean tokens in st.prev)."""
    L, dev = st.block_len, st.start.device
    slots = st.start + torch.arange(L, device=dev)
    k_block, k_state = slot_meta(st)
    block = 1 + (st.start - st.prompt_end) // L
    q_block = block.expand(L)
    mask = visibility(q_block, torch.ones_like(q_block), k_block, k_state, st.valid)  # [B, L, S]
    st.mask.copy_(see_self_if_blind(mask))
    st.pos.copy_(slots[None] - st.pad[:, None])
    st.slots.copy_(slots)
    st.n_valid.copy_((st.valid[:, slots] & ~st.fixed).sum(-1))  # answer positions (not prompt tail)
    if fused:
        # the staircase rule over [clean block k (state 0) | noisy block k + 1 (state 1)]: the clean
        # half sees the clean blocks <= k, the noisy half the clean blocks <= k and itself
        half = torch.arange(2 * L, device=dev) >= L
        fslots = st.start - L + torch.arange(2 * L, device=dev)
        fmask = visibility(block - 1 + half.long(), half.long(), k_block, k_state, st.valid)  # [B, 2L, S]
        st.fmask.copy_(see_self_if_blind(fmask))
        st.fpos.copy_(fslots[None] - st.pad[:, None])
        st.fslots.copy_(fslots)


def block_closed(st: DecodeState) -> Tensor:
    """[B] bool: the row's block takes no more steps (no mask left, and no llada21 edit-only step)."""
    return ~(st.unresolved.any(-1) | st.open)


def block_forward(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds) -> Tensor:
    """One forward of the current block against the cache -> logits [B, L, V], banned ids at -inf.

    Rows whose block is resolved run their commit forward here (clean canvas): for a shifted model
    their last position's state becomes st.carry, from which the next block's first token is read.
    Rows still denoising keep the carry of the block before."""
    h = model(st.canvas, st.pos, st.mask, cache=st.cache, slots=st.slots, mask_id=ids.mask,
              z=st.z, a=st.a, unresolved=st.unresolved, residual=cfg.residual, return_hidden=True)
    logits = model.read_out(h, before=st.carry)
    if model.args.shift_logits:
        resolved = block_closed(st)[:, None]  # [B, 1]
        st.carry.copy_(torch.where(resolved, h[:, -1], st.carry))
    return logits.masked_fill(st.banned, float("-inf"))


def fused_forward(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds) -> Tensor:
    """The commit forward of the previous block (st.prev, resolved) and the first step of the current
    one in one forward over 2L tokens -> the current block's logits [B, L, V], banned ids at -inf.
    Same inputs per half as the two forwards it replaces: the clean half has no residual (resolved),
    the noisy half the current z / a (a cold start: zero). A shifted model reads the current block's
    first token off the previous block's last clean position, now in this forward (h[:, L - 1]),
    which also becomes the carry of rows still denoising."""
    L = st.block_len
    residual = {}
    if cfg.residual != "off":
        zeros = torch.zeros_like(st.unresolved)
        residual = dict(z=torch.cat([torch.zeros_like(st.z), st.z], 1), a=torch.cat([torch.zeros_like(st.a), st.a], 1),
                        unresolved=torch.cat([zeros, st.unresolved], 1))
    h = model(torch.cat([st.prev, st.canvas], 1), st.fpos, st.fmask, cache=st.cache, slots=st.fslots,
              mask_id=ids.mask, residual=cfg.residual, return_hidden=True, **residual)
    last_clean, h = h[:, L - 1], h[:, L:]
    logits = model.read_out(h, before=last_clean)
    if model.args.shift_logits:
        resolved = block_closed(st)[:, None]  # [B, 1]: as block_forward, for finished rows
        st.carry.copy_(torch.where(resolved, h[:, -1], last_clean))
    return logits.masked_fill(st.banned, float("-inf"))


def denoise_step(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds,
                 record: bool = False, fused: bool = False) -> None:
    """One denoising step of every row (a no-op for rows whose block is resolved), in place.
    record (a Python constant, like cfg): also write the step's outputs (st.last_*) for a trace; the
    entropy is computed only for the entropy rule or a trace. Traces run this eagerly step by step;
    the compiled / captured chunks never record, so they skip that work. fused: the block's first
    step, fused with the previous block's commit forward (`fused_forward`).
    cfg chooses the code (rule, residual mode, greedy or sampled, EOS fill); the numbers come from
    st.knobs, so one compiled or captured step serves every tau, temperature, factor and bound."""
    logits = (fused_forward if fused else block_forward)(model, st, cfg, ids)
    B, L, V = logits.shape
    active = ~block_closed(st)  # [B]
    noise = None
    if cfg.temperature > 0:
        noise = hash_uniform(st.seed, st.global_step, L, V)
    # top_k / top_p: the draw and every confidence read the truncated distribution (as the published
    # samplers' token probability); the residual context keeps the model's own
    sel = top_k_top_p(logits, st.knobs.temperature, st.knobs.top_k, st.knobs.top_p) if cfg.truncated else logits
    x, conf, ent = select_tokens(sel, st.knobs.temperature, noise, entropy=record or cfg.rule == "entropy")
    conf = rank_score(cfg.confidence, sel, x, conf, st.knobs.temperature, st.seed, st.global_step)
    commit = commit_positions(cfg, conf, ent, st.unresolved, st.steps, st.n_valid, st.knobs)
    edit = None
    if cfg.rule == "llada21":  # token-to-token: committed answer tokens of a running row may change
        editable = st.answer & ~st.unresolved & active[:, None]
        edit = llada21_edit_rule(conf, x, st.canvas, editable, st.knobs.editing_threshold)
        canvas = torch.where(commit | edit, x, st.canvas)
    else:
        canvas = torch.where(commit, x, st.canvas)
    unresolved = st.unresolved & ~commit
    if cfg.eos_fill:
        # positions after a resolved EOS can only be EOS: resolve them now
        eos = is_eos(canvas, ids) & ~unresolved & ~st.fixed  # a prompt tail's EOS ends nothing
        after = eos.cumsum(-1) > eos  # an EOS strictly before: the count up to i exceeds EOS at i
        canvas = torch.where(after & unresolved, ids.eos, canvas)
        unresolved = unresolved & ~after
    if cfg.residual != "off":
        z, a = residual_state(logits, model.model.embed_tokens.weight, st.knobs.residual_temperature)
        st.z.copy_(torch.where(active[:, None, None], z, st.z))
        st.a.copy_(torch.where(active[:, None], a, st.a))
    if edit is not None:
        post_steps(st, active, edit, unresolved)
    st.canvas.copy_(canvas)
    st.unresolved.copy_(unresolved)
    st.steps.add_(active)
    st.global_step.add_(active)
    if record:
        st.last_x.copy_(x)
        st.last_conf.copy_(conf)
        st.last_entropy.copy_(ent)
        st.last_commit.copy_(commit if edit is None else commit | edit)


def post_steps(st: DecodeState, active: Tensor, edit: Tensor, unresolved: Tensor) -> None:
    """LLaDA2.1 generate()'s block loop, per row: a step that began without masks and edited nothing
    ends the block; otherwise a step begun without masks is a post step, and the block ends before
    post step max_post_steps + 1. Decided here, after the step, so no forward is spent on a row whose
    next step would not run. active [B]: the rows that ran; unresolved [B, L]: masks left after it."""
    began_clean = ~st.unresolved.any(-1)
    going = active & ~(began_clean & ~edit.any(-1))
    post = st.post + (going & ~unresolved.any(-1)).long()
    st.post.copy_(post)
    st.open.copy_(going & (post <= st.knobs.max_post_steps))


def ar_first_token(model: Transformer, st: DecodeState, ids: SpecialIds, eos_fill: bool) -> None:
    """Fast-dLLM v2: a block's first token is decoded autoregressively, greedy, off the previous
    position's state (st.carry: the prefill's last prompt position, or the previous block's commit
    forward) and committed before the block's first step. Only where the block's first position is a
    live row's masked answer position (not a prompt tail on the absolute grid). Tensor work only."""
    logits = model.read_out(st.carry[:, None])[:, 0].masked_fill(st.banned, float("-inf"))  # [B, V]: next token
    first = logits.argmax(-1)  # [B]
    take = st.unresolved[:, 0].clone()  # [B]: a copy, read again after the column is cleared below
    st.canvas[:, 0] = torch.where(take, first, st.canvas[:, 0])
    st.unresolved[:, 0] = st.unresolved[:, 0] & ~take
    if eos_fill:  # an EOS first token ends the row's answer: the rest of the block is EOS
        stop = take & is_eos(first, ids)
        st.canvas.copy_(torch.where(stop[:, None] & st.unresolved, ids.eos, st.canvas))
        st.unresolved.copy_(st.unresolved & ~stop[:, None])


def run_chunk(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds,
              fused: bool = False) -> Tensor:
    """cfg.chunk_steps denoising steps unrolled, the first one fused with the previous block's commit
    forward when fused; returns [] bool 'every row's block is resolved'."""
    for i in range(cfg.chunk_steps):
        denoise_step(model, st, cfg, ids, fused=fused and i == 0)
    return block_closed(st).all()
