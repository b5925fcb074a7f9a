"""The device-side decode state and the per-step function of dlmrt (DESIGN section 3).

Everything here is pure tensor code on static buffers: no .item(), no .tolist(), no Python branch on
a tensor value, so `denoise_step` compiles with fullgraph=True and captures as a CUDA graph. Rows
whose block is finished are predicated no-ops: they still run the forward (static shapes) but their
state does not change. A step over a fully resolved block is exactly the block's commit forward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from orl.engine.commit import commit_positions, hash_uniform, select_tokens
from orl.engine.config import DecodeConfig
from orl.model.kv_cache import KVCache
from orl.model.masks import see_self_if_blind, visibility
from orl.model.model import Transformer
from orl.model.residual import residual_state


class SpecialIds(NamedTuple):
    mask: int
    eos: int
    pad: int
    banned: tuple[int, ...] = ()  # never valid outputs (see `special_ids`)


def special_ids(tokenizer, vocab_size: int) -> SpecialIds:
    """The mask token, pad unless it doubles as EOS (HF tokenizers), and the model's padded vocabulary
    rows beyond the tokenizer are never valid outputs."""
    m, e, p = tokenizer.mask_id, tokenizer.eos_id, tokenizer.pad_id
    banned = (m,) + ((p,) if p != e else ()) + tuple(range(tokenizer.vocab_size, vocab_size))
    return SpecialIds(m, e, p, banned)


@dataclass
class DecodeState:
    """Static buffers of one batch shape, allocated once and reused for every block and request."""
    cache: KVCache
    valid: Tensor        # [B, S] bool: key slot holds a real token (no left padding, within max_new)
    pad: Tensor          # [B] left padding of each row (RoPE position = slot - pad)
    prompt_end: Tensor   # [] slot where the answer starts (the padded prompt length)
    start: Tensor        # [] first slot of the current block
    canvas: Tensor       # [B, L] current block tokens (mask token where unresolved)
    unresolved: Tensor   # [B, L] bool
    z: Tensor            # [B, L, D] soft embedding consumed by the next step
    a: Tensor            # [B, L] normalised entropy consumed by the next step (RCD mode)
    steps: Tensor        # [B] denoising steps of the current block
    global_step: Tensor  # [B] denoising steps since the request started (noise counter)
    seed: Tensor         # [B] sampling seed of each row
    # per-step outputs, kept for traces (overwritten every step)
    last_x: Tensor       # [B, L] token proposed at every position
    last_conf: Tensor    # [B, L]
    last_entropy: Tensor  # [B, L]
    last_commit: Tensor  # [B, L] bool

    @classmethod
    def allocate(cls, model: Transformer, batch: int, max_len: int, block_len: int) -> "DecodeState":
        w = model.model.embed_tokens.weight
        dev, dt, D = w.device, w.dtype, model.args.dim

        def z(*shape, dtype=torch.long):
            return torch.zeros(*shape, dtype=dtype, device=dev)

        B, L = batch, block_len
        return cls(cache=model.new_cache(B, max_len), valid=z(B, max_len, dtype=torch.bool), pad=z(B),
                   prompt_end=z(()), start=z(()), canvas=z(B, L), unresolved=z(B, L, dtype=torch.bool),
                   z=z(B, L, D, dtype=dt), a=z(B, L, dtype=dt), steps=z(B), global_step=z(B), seed=z(B),
                   last_x=z(B, L), last_conf=z(B, L, dtype=torch.float),
                   last_entropy=z(B, L, dtype=torch.float), last_commit=z(B, L, dtype=torch.bool))

    @property
    def block_len(self) -> int:
        return self.canvas.shape[1]


def slot_meta(st: DecodeState) -> tuple[Tensor, Tensor]:
    """Block id and state id [S] of every cache slot, for the one mask rule of orl.model.masks.
    The prompt is block 0; the current block's slots hold its noisy state (state 1)."""
    S, L = st.cache.max_len, st.block_len
    slot = torch.arange(S, device=st.start.device)
    block = torch.where(slot < st.prompt_end, 0, 1 + (slot - st.prompt_end).clamp(min=0) // L)
    state = ((slot >= st.start) & (slot < st.start + L)).long()
    return block, state


def prefill(model: Transformer, st: DecodeState, tokens: Tensor) -> None:
    """tokens [B, P] (left padded) -> K/V of the prompt in slots [0, P)."""
    B, P = tokens.shape
    slots = torch.arange(P, device=tokens.device)
    k_block, _ = slot_meta(st)
    zeros_q = torch.zeros(P, dtype=torch.long, device=tokens.device)
    mask = visibility(zeros_q, zeros_q, k_block, torch.zeros_like(k_block), st.valid)  # [B, P, S]
    pos = (slots[None] - st.pad[:, None]).clamp(min=0)
    model(tokens, pos, see_self_if_blind(mask), cache=st.cache, slots=slots)


def block_forward(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds) -> Tensor:
    """One forward of the current block against the cache -> logits [B, L, V]."""
    L = st.block_len
    slots = st.start + torch.arange(L, device=st.start.device)
    k_block, k_state = slot_meta(st)
    q_block = (1 + (st.start - st.prompt_end) // L).expand(L)
    mask = visibility(q_block, torch.ones_like(q_block), k_block, k_state, st.valid)  # [B, L, S]
    pos = slots[None] - st.pad[:, None]
    logits = model(st.canvas, pos, see_self_if_blind(mask), cache=st.cache, slots=slots, mask_id=ids.mask,
                   z=st.z, a=st.a, unresolved=st.unresolved, residual=cfg.residual)
    return ban_tokens(logits, ids.banned)


def _runs(ids: tuple[int, ...]) -> list[tuple[int, int]]:
    """Sorted ids -> runs [lo, hi) of consecutive ids (mask, pad, the padded vocab rows: <= 3 runs)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(lo, hi) for lo, hi in runs]


def ban_tokens(logits: Tensor, ids: tuple[int, ...]) -> Tensor:
    """-inf at the banned ids. The mask is computed on the device from Python ints: building an index
    tensor from host data (torch.tensor(ids, device=...)) in the step would be a host-to-device copy,
    which PyTorch follows with a stream sync, and which CUDA graph capture rejects."""
    vocab = torch.arange(logits.shape[-1], device=logits.device)
    banned = torch.zeros_like(vocab, dtype=torch.bool)
    for lo, hi in _runs(ids):
        banned = banned | ((vocab >= lo) & (vocab < hi))
    return logits.masked_fill(banned, float("-inf"))


def denoise_step(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds) -> None:
    """One denoising step of every row (a no-op for rows whose block is resolved), in place."""
    logits = block_forward(model, st, cfg, ids)
    B, L, V = logits.shape
    active = st.unresolved.any(-1)  # [B]
    noise = None
    if cfg.temperature > 0:
        noise = hash_uniform(st.seed, st.global_step, L, V)
    x, conf, ent = select_tokens(logits, cfg.temperature, noise)
    n_valid = st.valid.gather(1, (st.start + torch.arange(L, device=x.device)).expand(B, L)).sum(-1)
    commit = commit_positions(cfg, conf, ent, st.unresolved, st.steps, n_valid)
    canvas = torch.where(commit, x, st.canvas)
    unresolved = st.unresolved & ~commit
    if cfg.eos_fill:
        # positions after a resolved EOS can only be EOS: resolve them now
        eos = ((canvas == ids.eos) & ~unresolved).long()
        after = (eos.cumsum(-1) - eos) > 0
        fill = after & unresolved
        canvas = torch.where(fill, ids.eos, canvas)
        unresolved = unresolved & ~fill
    if cfg.residual != "off":
        z, a = residual_state(logits, model.model.embed_tokens.weight, cfg.residual_temperature)
        st.z.copy_(torch.where(active[:, None, None], z, st.z))
        st.a.copy_(torch.where(active[:, None], a, st.a))
    st.canvas.copy_(canvas)
    st.unresolved.copy_(unresolved)
    st.steps.add_(active.long())
    st.global_step.add_(active.long())
    st.last_x.copy_(x)
    st.last_conf.copy_(conf)
    st.last_entropy.copy_(ent)
    st.last_commit.copy_(commit)


def run_chunk(model: Transformer, st: DecodeState, cfg: DecodeConfig, ids: SpecialIds) -> Tensor:
    """cfg.chunk_steps denoising steps unrolled; returns [] bool 'every row's block is resolved'."""
    for _ in range(cfg.chunk_steps):
        denoise_step(model, st, cfg, ids)
    return ~st.unresolved.any()
