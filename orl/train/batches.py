"""Training batches: autoregressive rows and staircase block-diffusion rows (DESIGN section 2).

Rows of a batch share one layout: prompts are left-padded to the longest prompt (pad keys are
invisible, RoPE positions start at each row's first real token) and answers (+ EOS) are right-padded
with EOS to a whole number of blocks, which is exactly what the engine's EOS fill produces.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from orl.model.masks import causal, see_self_if_blind, staircase
from orl.model.padding import left_pad

TAIL_WEIGHT = 0.25  # EOS padding after the first EOS is easy and plentiful; keep it from dominating


@dataclass
class Batch:
    tokens: Tensor     # [B, T]
    pos: Tensor        # [B, T]
    mask: Tensor       # [B, T, T] bool
    targets: Tensor    # [B, T] token to predict at each position
    weight: Tensor     # [B, T] loss weight (0 = no loss)
    read_from: Tensor | None = None  # [T] the position before each one (diffusion rows; see Transformer.read_out)

    @property
    def n_tokens(self) -> int:
        return self.tokens.numel()


def ar_batch(pairs: list[tuple[list[int], list[int]]], pad_id: int, eos_id: int) -> Batch:
    """Causal rows prompt + answer + EOS; next-token loss on the answer and its EOS only."""
    prompts, pad = left_pad([p for p, _ in pairs], pad_id)
    A = max(len(a) for _, a in pairs) + 1
    ans = torch.full((len(pairs), A), eos_id, dtype=torch.long)
    w_ans = torch.zeros(len(pairs), A)
    for b, (_, a) in enumerate(pairs):
        ans[b, : len(a)] = torch.tensor(a, dtype=torch.long)
        w_ans[b, : len(a) + 1] = 1.0
    seq = torch.cat([prompts, ans], 1)
    B, T = seq.shape
    P = prompts.shape[1]
    valid = torch.arange(T)[None] >= pad[:, None]
    tokens, targets = seq[:, :-1], seq[:, 1:]
    weight = torch.cat([torch.zeros(B, P - 1), w_ans], 1)
    pos = (torch.arange(T - 1)[None] - pad[:, None]).clamp(min=0)
    mask = see_self_if_blind(causal(T - 1, valid[:, :-1]))
    return Batch(tokens, pos, mask, targets, weight)


def next_token_batch(rows: Tensor) -> Batch:
    """Causal rows of plain text [B, T]: next-token loss at every position (the state at i predicts token
    i + 1; no EOS is added: a window of text just stops). The convert recipe's `ar_aux` rows."""
    B, T = rows.shape
    mask = causal(T - 1)[None].expand(B, -1, -1)
    pos = torch.arange(T - 1)[None].expand(B, -1)
    return Batch(rows[:, :-1], pos, mask, rows[:, 1:], torch.ones(B, T - 1))


def answer_blocks(answer: list[int], eos_id: int, length: int, eos: bool = True) -> tuple[Tensor, Tensor]:
    """answer + EOS padded with EOS to `length` -> tokens [length], weight [length]."""
    toks = torch.full((length,), eos_id, dtype=torch.long)
    toks[: len(answer)] = torch.tensor(answer, dtype=torch.long)
    w = torch.full((length,), TAIL_WEIGHT)
    w[: len(answer) + eos] = 1.0
    return toks, w


def grid_pairs(pairs: list[tuple[list[int], list[int]]], block_len: int) -> tuple[list, list[int]]:
    """(prompt, answer) pairs of whole grid blocks: each prompt's last, partial block (its tail, which
    opens the engine's first canvas on the absolute grid) moves to the front of the answer; returns
    the pairs and every row's tail length, for diffusion_batch(grid=True, fixed=...)."""
    cut = [len(p) // block_len * block_len for p, _ in pairs]
    return [(p[:c], p[c:] + a) for (p, a), c in zip(pairs, cut)], [len(p) - c for (p, _), c in zip(pairs, cut)]


def diffusion_batch(pairs: list[tuple[list[int], list[int]]], block_len: int, ids, gen: torch.Generator,
                    copies: int = 1, eos: bool = True, grid: bool = False, fixed: list[int] | None = None) -> Batch:
    """Staircase rows: clean prompt + answer, then `copies` noisy states of every answer block.
    eos=False: the answers are windows cut from running text, not followed by EOS (orl.train.convert).
    grid: the engine's absolute_grid layout (masks.staircase_layout); every prompt must be whole blocks,
    so that left padding is whole blocks too and the grid of slots is the grid of positions.
    fixed: per row, how many leading answer tokens are prompt (grid_pairs' tails): never masked, no loss.

    Each noisy state masks each position with probability t ~ U(0, 1) (at least one position), and
    the loss is cross-entropy at the masked positions (plain mean: it beat 1/t weighting here).
    """
    if grid and any(len(p) % block_len for p, _ in pairs):
        raise ValueError(f"absolute grid rows need prompts of whole blocks of {block_len}, got lengths "
                         f"{sorted({len(p) for p, _ in pairs})}")
    prompts, pad = left_pad([p for p, _ in pairs], ids.pad)
    B, P = prompts.shape
    A = -(-(max(len(a) for _, a in pairs) + eos) // block_len) * block_len
    n_blocks = A // block_len
    ans, ans_w = zip(*(answer_blocks(a, ids.eos, A, eos) for _, a in pairs))
    ans, ans_w = torch.stack(ans), torch.stack(ans_w)
    clean = torch.cat([prompts, ans], 1)  # [B, P + A]
    noisy_blocks = [j for _ in range(copies) for j in range(n_blocks)]
    meta, mask = staircase(P, A, block_len, noisy_blocks, grid=grid)
    src = meta["src"]  # [T]
    T = src.numel()
    N = T - (P + A)
    tokens = clean[:, src]
    targets = clean[:, src]
    # noise: one t per (row, noisy state), shared by the state's positions
    state = meta["state"][P + A:] - 1                  # [N] noisy state index
    t = torch.rand(B, len(noisy_blocks), generator=gen)[:, state]  # [B, N]
    u = torch.rand(B, N, generator=gen)
    free = torch.ones(B, N, dtype=torch.bool)  # positions that may be masked: all but the fixed prompt tails
    if fixed is not None:
        free = (src[P + A:] - P)[None] >= torch.tensor(fixed)[:, None]
    masked = (u < t) & free
    # guarantee one masked position per state: the free position with the smallest u in each state (a
    # block always has one: a tail is shorter than a block); the draws are the same with or without tails
    u_free = torch.where(free, u, 2.0)
    u_state = torch.full((B, len(noisy_blocks)), 2.0).scatter_reduce(1, state.expand(B, N), u_free, "amin")
    masked |= free & (u_free == u_state[:, state])
    tokens[:, P + A:] = torch.where(masked, ids.mask, tokens[:, P + A:])
    weight = torch.zeros(B, T)
    weight[:, P + A:] = torch.where(masked, ans_w[:, src[P + A:] - P], 0.0)
    pos = (meta["pos"][None] - pad[:, None]).clamp(min=0)
    valid = torch.cat([torch.arange(P)[None] >= pad[:, None], torch.ones(B, T - P, dtype=torch.bool)], 1)
    full_mask = see_self_if_blind(mask[None] & valid[:, None, :])
    return Batch(tokens, pos, full_mask, targets, weight, meta["read_from"])


def shift_positions(batch: Batch, max_len: int, frac: float, gen: torch.Generator) -> None:
    """Move a random `frac` of the rows to a random start position that keeps them within max_len.

    A learned position table only trains the rows the training lengths reach; longer answers at
    inference would read untrained rows. Shifted rows train every row while the unshifted ones keep
    the start at 0 that inference uses. RoPE is relative, so only the learned table sees the shift.
    """
    B = batch.pos.shape[0]
    room = (max_len - 1 - batch.pos.max(dim=1).values).clamp(min=0)   # [B]
    offset = (torch.rand(B, generator=gen) * (room + 1)).floor().long()
    on = torch.rand(B, generator=gen) < frac
    batch.pos = batch.pos + torch.where(on, offset, 0)[:, None]


def stretch_positions(batch: Batch, frac: float, max_stretch: float, gen: torch.Generator) -> None:
    """Give a random `frac` of the rows RoPE positions with gaps (randomized positional encodings, Ruoss et
    al. 2023): a row whose positions run 0..P gets a sorted random subset of range(ceil(s (P + 1))), s drawn
    uniformly from [1, max_stretch] per row, mapped value by value (equal positions stay equal, order is kept).

    Prompts beyond the training lengths put the answer further from the items it reads than any training row
    did; stretched rows show the model those distances at the training lengths, while the other rows keep the
    contiguous positions inference uses. The masks are explicit, so only RoPE sees the change (a learned
    position table would read rows it never trained: PretrainConfig refuses that pairing)."""
    B = batch.pos.shape[0]
    batch.pos = batch.pos.clone()  # an expanded pos (next_token_batch) shares one row's memory among all rows
    on = torch.rand(B, generator=gen) < frac                                      # [B]
    scale = 1.0 + torch.rand(B, generator=gen) * (max_stretch - 1.0)                # [B]
    for b in range(B):
        if not on[b]:
            continue
        n = int(batch.pos[b].max()) + 1  # position values 0..n-1 (left pads share position 0)
        room = int(torch.ceil(scale[b] * n))
        table = torch.randperm(room, generator=gen)[:n].sort().values              # [n] increasing
        batch.pos[b] = table[batch.pos[b]]


def weighted_ce_sum(logits: Tensor, batch: Batch) -> Tensor:
    """Sum over positions of weight x cross-entropy (a share of a loss normalised over a whole batch)."""
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten(), reduction="none")
    return (ce * batch.weight.flatten().to(ce.dtype)).sum()


def weighted_ce(logits: Tensor, batch: Batch) -> Tensor:
    """Weighted mean cross-entropy over positions with weight > 0."""
    return weighted_ce_sum(logits, batch) / batch.weight.sum().clamp(min=1e-6)
