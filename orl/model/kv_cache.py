"""Static, preallocated KV cache. Writes go to slot indices given as a device tensor, so the same
captured graph serves every block; attention always reads the whole buffer through a mask.
The RoPE position of every written slot is kept too: sliding-window layers mask keys by position
distance (orl.model.masks.sliding_window), whatever slot layout the engine uses."""
from __future__ import annotations

import os

import torch
from torch import Tensor, nn

# A forged or careless max_seq_len must not ask for terabytes: caches above this fail with a named error.
BUDGET_ENV = "ORL_KV_CACHE_GIB"
DEFAULT_BUDGET_GIB = 32.0


def check_cache_budget(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    n_bytes = 2 * torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()  # K and V
    budget = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_GIB))
    if n_bytes > budget * 2**30:
        raise ValueError(f"KV cache of {shape[3]} positions x batch {shape[1]} needs {n_bytes / 2**30:.1f} GiB, over "
                         f"the {budget:g} GiB budget ({BUDGET_ENV}); decode with a smaller max_len or lower the "
                         "model's max_seq_len")


class KVCache(nn.Module):
    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        check_cache_budget(shape, dtype)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("pos", torch.zeros(batch, max_len, dtype=torch.long, device=device), persistent=False)
        # committed slots; a device tensor so that no host value leaks into the decode graph
        self.register_buffer("length", torch.zeros((), dtype=torch.long, device=device), persistent=False)

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def update(self, layer: int, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v [B, Hkv, T, Dh] at slots [T]; return the full buffers [B, Hkv, S, Dh]."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))
        return self.k[layer], self.v[layer]

    def write_pos(self, slots: Tensor, pos: Tensor) -> Tensor:
        """Record the positions pos [B or 1, T] of slots [T]; return every slot's position [B, S]."""
        self.pos.index_copy_(1, slots, pos.expand(self.pos.shape[0], -1))
        return self.pos

    def reset(self) -> None:
        self.k.zero_()
        self.v.zero_()
        self.pos.zero_()
        self.length.zero_()
