"""Which token ids a model may output: a property of the tokenizer and the model's vocabulary, shared
by the engine (every denoising step) and training (losses over the same distributions)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class SpecialIds(NamedTuple):
    mask: int
    eos: int
    pad: int
    banned: tuple[int, ...] = ()  # never valid outputs (see `special_ids`)
    eos_ids: tuple[int, ...] = ()  # every id that ends a row (eos, end-of-turn, ...; eos itself always does)


def is_eos(tokens: Tensor, ids: SpecialIds) -> Tensor:
    """tokens == any of the EOS ids, elementwise: a few compares against Python ints (no index tensor
    from host data, so no host-to-device copy inside a step)."""
    stop = tokens == ids.eos
    for e in ids.eos_ids:
        if e != ids.eos:
            stop = stop | (tokens == e)
    return stop


def special_ids(tokenizer, vocab_size: int) -> SpecialIds:
    """The mask token, pad unless it doubles as EOS (HF tokenizers), and the model's padded vocabulary
    rows beyond the tokenizer are never valid outputs."""
    m, e, p = tokenizer.mask_id, tokenizer.eos_id, tokenizer.pad_id
    banned = (m,) + ((p,) if p != e else ()) + tuple(range(tokenizer.vocab_size, vocab_size))
    return SpecialIds(m, e, p, banned, tuple(getattr(tokenizer, "eos_ids", None) or (e,)))


def _runs(ids: tuple[int, ...]) -> list[tuple[int, int]]:
    """Sorted ids -> runs [lo, hi) of consecutive ids (mask, pad, the padded vocab rows: <= 3 runs)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(lo, hi) for lo, hi in runs]


def banned_mask(vocab_size: int, ids: tuple[int, ...], device=None) -> Tensor:
    """[V] bool, True at the banned ids, computed on the device from Python ints: an index tensor
    made from host data (torch.tensor(ids, device=...)) would be a host-to-device copy, which
    PyTorch follows with a stream sync, and which CUDA graph capture rejects. The engine builds it
    once per state (DecodeState.banned); ban_tokens is for code without a state (training)."""
    vocab = torch.arange(vocab_size, device=device)
    banned = torch.zeros_like(vocab, dtype=torch.bool)
    for lo, hi in _runs(ids):
        banned = banned | ((vocab >= lo) & (vocab < hi))
    return banned


def ban_tokens(logits: Tensor, ids: tuple[int, ...]) -> Tensor:
    """-inf at the banned ids."""
    return logits.masked_fill(banned_mask(logits.shape[-1], ids, logits.device), float("-inf"))
