"""Left padding: the one batch layout of training rows, the diffusion engine and the AR decoder.

Prompts are right-aligned at the longest one; a row's pad slots are invisible keys and its RoPE
positions start at its first real token (position = slot - pad), so a row computes what it would alone.
"""
from __future__ import annotations

import torch
from torch import Tensor


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """-> tokens [B, P] (P the longest prompt), pad [B] (pad slots of each row), both int64 on the CPU."""
    P = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    for b, p in enumerate(prompts):
        tokens[b, P - len(p):] = torch.tensor(p, dtype=torch.long)
    return tokens, torch.tensor([P - len(p) for p in prompts], dtype=torch.long)
