"""Replay of captured denoising states with staircase attention (DESIGN sections 2 and 4).

A *unit* is one kept response (a verified rollout, or the relabelled prefix of an unverified one:
orl.train.relabel): its clean prompt + answer once, then every captured state of its
blocks (all states are kept: tiny blocks take few steps, and AEC needs every adjacent pair). A
noisy state of block j sees the clean prompt and answer blocks < j and itself, exactly what the
engine's cache held when the step ran, and consumes exactly the captured z / a. Units are packed
into rows (doc ids keep them apart) balanced by estimated attention cost.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from orl.engine.layouts import prompt_blocks
from orl.model.masks import predecessors, see_self_if_blind, visibility
from orl.train.losses import IGNORE
from orl.train.rollout import Rollout


@dataclass
class Unit:
    tokens: Tensor      # [T] clean prompt + answer, then the states' canvases
    pos: Tensor         # [T] RoPE position
    block: Tensor       # [T] block id (prompt 0)
    state: Tensor       # [T] 0 clean, s >= 1 the s-th state of the unit
    targets: Tensor     # [T] verified token at every position (IGNORE past a stop string)
    unresolved: Tensor  # [T] bool, True only at a state's unresolved positions
    confident: Tensor   # [T] bool, unresolved and already confident in the rollout
    z: Tensor           # [T, D] residual consumed (zeros elsewhere)
    a: Tensor           # [T]
    read_from: Tensor   # [T] unit index of the position before each one (shifted read-out)
    pairs: list[tuple[int, int]]  # (s, s + 1) adjacent states of one block, 1-based state ids
    cost: int           # tokens x attended tokens

    @property
    def length(self) -> int:
        return self.tokens.numel()


def canvas_start(layout: str, n: int, L: int) -> int:
    """Position of a row's first canvas for an n-token prompt: right after it (prompt_block), or at the start
    of its last incomplete block, which the canvas opens with (absolute_grid)."""
    return n // L * L if layout == "absolute_grid" else n


def make_unit(r: Rollout, block_len: int, eos_id: int, dim: int, kl_conf: float, layout: str = "prompt_block",
              max_new_tokens: int | None = None) -> Unit:
    """The unit of one rollout in the layout it was decoded in (orl.engine.layouts), so that every state
    sees what the engine's cache held: the same keys, block order and RoPE positions.
    prompt_block: the prompt is block 0, answer block j covers positions n + j L (n: prompt length).
    absolute_grid: block = position // L; the prompt's complete blocks come before the first canvas,
    which starts at c = n // L * L and opens with the prompt tail (fixed tokens, never unresolved).
    max_new_tokens: where the row's answer ends (default: whole blocks); positions beyond it were
    invalid slots for the engine, so they are left out of the clean sequence and of the states."""
    trace, L = r.gen.trace, block_len
    prompt = torch.tensor(r.gen.prompt_ids, dtype=torch.long)
    n = prompt.numel()
    c = canvas_start(layout, n, L)
    # the blocks the answer covers, traced or not: Fast-dLLM v2's AR first token can resolve a block with
    # no step (an EOS first token leaves the whole trace empty), and such a block still holds answer tokens
    n_blocks = max(max((rec.block + 1 for rec in trace), default=0), -(-(n + r.gen.n_tokens - c) // L))
    end = n + (max_new_tokens if max_new_tokens is not None else c + n_blocks * L - n)
    clean = torch.full((end,), eos_id, dtype=torch.long)  # past the row's EOS: EOS, as eos_fill commits
    clean[:n] = prompt
    clean[n: n + r.gen.n_tokens] = torch.tensor(r.gen.token_ids, dtype=torch.long)
    target = clean
    if r.gen.stop is not None:
        # a stop string ended the row inside its last block: the engine committed tokens after it that the
        # rollout dropped (unverified text, not the EOS an eos_fill commits), so they are no target
        target = clean.clone()
        target[n + r.gen.n_tokens:] = IGNORE
    p = torch.arange(end)
    clean_block = torch.where(p < c, prompt_blocks(layout, end, c, L, None), (p - c).clamp(min=0) // L + 1)
    zero_b, zero_l = torch.zeros(end, dtype=torch.bool), torch.zeros(end, dtype=torch.long)
    toks, pos, blk, st, tgt = [clean], [p], [clean_block], [zero_l], [target]
    unres, conf, zs, as_ = [zero_b], [zero_b], [torch.zeros(end, dim)], [torch.zeros(end)]
    pairs = []
    for s, rec in enumerate(trace, start=1):
        lo = c + rec.block * L
        k = min(lo + L, end) - lo  # the last block may end before its L positions
        toks.append(rec.canvas[:k])
        pos.append(torch.arange(lo, lo + k))
        blk.append(torch.full((k,), rec.block + 1))
        st.append(torch.full((k,), s))
        tgt.append(target[lo: lo + k])
        unres.append(rec.unresolved[:k].clone())
        conf.append((rec.unresolved & (rec.confidence >= kl_conf))[:k])
        zs.append(rec.z[:k].float() if rec.z is not None else torch.zeros(k, dim))
        as_.append(rec.a[:k].float() if rec.a is not None else torch.zeros(k))
        if s > 1 and trace[s - 2].block == rec.block:
            pairs.append((s - 1, s))
    block, state = torch.cat(blk), torch.cat(st)
    cost = int(visibility(block, state, block, state).sum())
    position = torch.cat(pos)
    return Unit(torch.cat(toks), position, block, state, torch.cat(tgt), torch.cat(unres),
                torch.cat(conf), torch.cat(zs), torch.cat(as_), predecessors(state, position), pairs, cost)


def pack(units: list[Unit], row_tokens: int) -> list[list[int]]:
    """Greedy balanced packing: largest cost first, into the cheapest row that still has room."""
    rows: list[list[int]] = []
    cost: list[int] = []
    used: list[int] = []
    for i in sorted(range(len(units)), key=lambda i: -units[i].cost):
        u = units[i]
        if u.length > row_tokens:
            raise ValueError(f"a response needs {u.length} tokens, more than row_tokens={row_tokens}")
        fits = [r for r in range(len(rows)) if used[r] + u.length <= row_tokens]
        if fits:
            r = min(fits, key=lambda r: cost[r])
        else:
            rows.append([]), cost.append(0), used.append(0)
            r = len(rows) - 1
        rows[r].append(i)
        cost[r] += u.cost
        used[r] += u.length
    return rows


@dataclass
class ReplayBatch:
    tokens: Tensor      # [R, T]
    pos: Tensor
    mask: Tensor        # [R, T, T]
    targets: Tensor
    unresolved: Tensor  # [R, T] bool
    confident: Tensor
    z: Tensor           # [R, T, D]
    a: Tensor
    read_from: Tensor   # [R, T] row index of the position before each one (Transformer.read_out)
    noisy: Tensor       # [R, T] bool: position belongs to a replayed state
    response: Tensor    # [R, T] response index (per-response normalisation)
    state_id: Tensor    # [R, T] global state index (-1 for clean / padding)
    pair_src: Tensor    # [P] global state index of the source state
    pair_next: Tensor   # [P]
    pair_response: Tensor  # [P]
    n_states: int
    n_responses: int


def build_batch(units: list[Unit], rows: list[list[int]], pad_id: int) -> ReplayBatch:
    T = max(sum(units[i].length for i in row) for row in rows)
    R, D = len(rows), units[0].z.shape[-1]

    def full(fill, dtype, *extra):
        return torch.full((R, T, *extra), fill, dtype=dtype)

    out = {k: full(0, torch.long) for k in ("pos", "block", "state", "doc", "targets", "response", "read_from")}
    out["tokens"] = full(pad_id, torch.long)
    out["state_id"] = full(-1, torch.long)
    for k in ("unresolved", "confident", "valid"):
        out[k] = full(False, torch.bool)
    out["z"], out["a"] = full(0.0, torch.float, D), full(0.0, torch.float)
    src, nxt, presp = [], [], []
    n_states = 0
    for r, row in enumerate(rows):
        off = 0
        for doc, i in enumerate(row):
            u = units[i]
            sl = slice(off, off + u.length)
            for k in ("tokens", "pos", "block", "state", "targets", "unresolved", "confident", "z", "a"):
                out[k][r, sl] = getattr(u, k)
            out["read_from"][r, sl] = u.read_from + off
            out["doc"][r, sl] = doc
            out["valid"][r, sl] = True
            out["response"][r, sl] = i
            out["state_id"][r, sl] = torch.where(u.state > 0, u.state - 1 + n_states, -1)
            for s, s1 in u.pairs:
                src.append(n_states + s - 1), nxt.append(n_states + s1 - 1), presp.append(i)
            n_states += int(u.state.max())
            off += u.length
    mask = visibility(out["block"], out["state"], out["block"], out["state"], out["valid"], out["doc"], out["doc"])
    as_long = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return ReplayBatch(out["tokens"], out["pos"], see_self_if_blind(mask), out["targets"], out["unresolved"],
                       out["confident"], out["z"], out["a"], out["read_from"], out["state"] > 0, out["response"],
                       out["state_id"],
                       as_long(src), as_long(nxt), as_long(presp), n_states, len(units))
