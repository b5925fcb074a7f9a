"""One mask builder for every attention visibility pattern (DESIGN section 2).

Every token carries metadata and one rule decides who sees whom:
  block  the block index: the prompt is block 0, answer block j is block j + 1
  state  0 for the clean sequence, s > 0 for the s-th noisy state in the row
  doc    which packed response the token belongs to (tokens of different docs never meet)
  valid  False for padding keys

Rule (query q, key k; same doc, k valid):
  clean q sees clean k with block(k) <= block(q)                     (block-causal)
  noisy q sees clean k with block(k) <  block(q), and its own state  (staircase)
With one noisy state per block this is the BD3-LM / SDAR training mask; with the current block as
the only noisy state over a cache of committed clean blocks it is the inference mask.
"""
from __future__ import annotations

import torch
from torch import Tensor


def visibility(q_block: Tensor, q_state: Tensor, k_block: Tensor, k_state: Tensor,
               k_valid: Tensor | None = None, q_doc: Tensor | None = None,
               k_doc: Tensor | None = None) -> Tensor:
    """Metadata [..., Q] and [..., K] -> bool mask [..., Q, K] (True = may attend)."""
    qb, qs = q_block[..., :, None], q_state[..., :, None]
    kb, ks = k_block[..., None, :], k_state[..., None, :]
    k_clean = ks == 0
    clean_q = (qs == 0) & k_clean & (kb <= qb)
    noisy_q = (qs != 0) & ((k_clean & (kb < qb)) | (ks == qs))
    mask = clean_q | noisy_q
    if k_valid is not None:
        mask = mask & k_valid[..., None, :]
    if q_doc is not None:
        mask = mask & (q_doc[..., :, None] == k_doc[..., None, :])
    return mask


def causal(n: int, valid: Tensor | None = None, device=None) -> Tensor:
    """[n, n] (or [B, n, n] with valid [B, n]) autoregressive mask."""
    idx = torch.arange(n, device=device)
    mask = idx[None, :] <= idx[:, None]
    if valid is not None:
        mask = mask & valid[:, None, :]
    return mask


def bidirectional(n: int, valid: Tensor | None = None, device=None) -> Tensor:
    mask = torch.ones(n, n, dtype=torch.bool, device=device)
    if valid is not None:
        mask = mask & valid[:, None, :]
    return mask


def block_ids(prompt_len: int, answer_len: int, block_len: int, device=None) -> Tensor:
    """[prompt_len + answer_len] block index: prompt = block 0, answer blocks of block_len after it."""
    if block_len <= 0:
        raise ValueError(f"block_len must be > 0, got {block_len}")
    ans = torch.arange(answer_len, device=device) // block_len + 1
    return torch.cat([torch.zeros(prompt_len, dtype=torch.long, device=device), ans])


def block_causal(prompt_len: int, answer_len: int, block_len: int, device=None) -> Tensor:
    """[T, T] mask of a clean sequence: bidirectional inside a block, causal across blocks."""
    b = block_ids(prompt_len, answer_len, block_len, device)
    zero = torch.zeros_like(b)
    return visibility(b, zero, b, zero)


def staircase_layout(prompt_len: int, answer_len: int, block_len: int, noisy_blocks: list[int],
                     device=None, grid: bool = False) -> dict[str, Tensor]:
    """Metadata of one training row: the clean sequence, then one noisy copy of each listed answer block.

    noisy_blocks holds answer block indices (0-based, may repeat for several states of one block).
    grid: the absolute grid (orl.engine.layouts): block = position // block_len from position 0, so the
    prompt is block-causal in blocks of block_len too; the prompt must then be whole blocks, so that
    every answer block is one grid block.
    Returns block, state, pos (RoPE position of every row token) and src (index into the clean
    sequence each row token copies), all [T_row].
    """
    n_blocks = -(-answer_len // block_len)
    T = prompt_len + answer_len
    if grid and prompt_len % block_len:
        raise ValueError(f"absolute grid rows need a prompt of whole blocks: {prompt_len} tokens, block_len {block_len}")
    clean_block = (torch.arange(T, device=device) // block_len if grid
                   else block_ids(prompt_len, answer_len, block_len, device))
    blocks, states, pos = [clean_block], [torch.zeros(T, dtype=torch.long, device=device)], [torch.arange(T, device=device)]
    for s, j in enumerate(noisy_blocks, start=1):
        if not 0 <= j < n_blocks:
            raise ValueError(f"noisy block {j} out of range: the answer has {n_blocks} blocks")
        lo, hi = prompt_len + j * block_len, min(prompt_len + (j + 1) * block_len, T)
        p = torch.arange(lo, hi, device=device)
        blocks.append(clean_block[lo:hi])
        states.append(torch.full_like(p, s))
        pos.append(p)
    position = torch.cat(pos)
    return {"block": torch.cat(blocks), "state": torch.cat(states), "pos": position, "src": position.clone(),
            "read_from": predecessors(torch.cat(states), position)}


def predecessors(state: Tensor, pos: Tensor) -> Tensor:
    """Index in the row of the token before each token (the shifted read-out, Transformer.read_out):
    the previous row token, except where a noisy state starts: the token before a block's first
    position is the clean copy of that position, at row index pos - 1 (the clean sequence comes
    first, laid out in position order from 0). state, pos [T] -> [T]; the row's first token -> 0."""
    idx = torch.arange(state.numel(), device=state.device)
    starts = (state > 0) & (state != torch.cat([state.new_zeros(1), state[:-1]]))
    return torch.where(starts, pos - 1, idx - 1).clamp(min=0)


def staircase(prompt_len: int, answer_len: int, block_len: int, noisy_blocks: list[int],
              device=None, grid: bool = False) -> tuple[dict[str, Tensor], Tensor]:
    """Layout metadata and its [T_row, T_row] mask."""
    meta = staircase_layout(prompt_len, answer_len, block_len, noisy_blocks, device, grid)
    return meta, visibility(meta["block"], meta["state"], meta["block"], meta["state"])


def sliding_window(mask: Tensor, q_pos: Tensor, k_pos: Tensor, window: int) -> Tensor:
    """A local (sliding-window) layer's mask: `mask` [B, T, K] and only keys within `window` positions
    back, k_pos > q_pos - window (transformers' sliding_window_overlay: the query plus window - 1
    before it). Later keys stay as `mask` says, so a bidirectional block keeps seeing itself.
    q_pos [B, T], k_pos [B, K] are RoPE positions, so left padding and cache slot layouts agree."""
    return mask & (k_pos[:, None, :] > q_pos[:, :, None] - window)


def see_self_if_blind(mask: Tensor) -> Tensor:
    """Padding queries see no key; let them see themselves so attention yields no NaN."""
    blind = ~mask.any(-1, keepdim=True)
    eye = torch.eye(mask.shape[-2], mask.shape[-1], dtype=torch.bool, device=mask.device)
    return mask | (blind & eye)
