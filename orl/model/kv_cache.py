"""Static, preallocated KV cache. Writes go to slot indices given as a device tensor, so the same
captured graph serves every block; attention always reads the whole buffer through a mask.
The RoPE position of every written slot is kept too: sliding-window layers mask keys by position
distance (orl.model.masks.sliding_window), whatever slot layout the engine uses.

Layers may differ in KV heads and head_dim (Gemma 4's global layers): layers of one shape share one
[layers_of_that_shape, B, Hkv, S, Dh] buffer. `k` / `v` are the first shape's buffers (for a uniform
model, all layers); `buffers_kv()` lists every buffer."""
from __future__ import annotations

import os

import torch
from torch import Tensor, nn

# A forged or careless size (max_seq_len, batch, request length) must not ask for terabytes: caches and
# decode states above this fail with a named error before anything is allocated.
BUDGET_ENV = "ORL_KV_CACHE_GIB"
DEFAULT_BUDGET_GIB = 32.0


class CacheBudgetError(ValueError):
    """A cache (or a decoder's state around one) larger than the ORL_KV_CACHE_GIB budget."""


def check_budget(n_bytes: int, what: str) -> None:
    """Refuse n_bytes over the budget; `what` names the buffers and their shape in the message."""
    budget = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_GIB))
    if n_bytes > budget * 2**30:
        raise CacheBudgetError(f"{what} needs {n_bytes / 2**30:.3g} GiB ({n_bytes} bytes), over the {budget:g} GiB "
                               f"budget ({BUDGET_ENV}); lower the batch size or the request's length (prompt + "
                               f"answer), or raise {BUDGET_ENV}")


def check_cache_budget(shape: tuple[int, ...], dtype: torch.dtype, numel: int | None = None) -> None:
    numel = torch.Size(shape).numel() if numel is None else numel
    n_bytes = 2 * numel * torch.empty((), dtype=dtype).element_size()  # K and V
    check_budget(n_bytes, f"KV cache of {shape[3]} positions x batch {shape[1]}")


class KVCache(nn.Module):
    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device=None,
                 layer_shapes: list[tuple[int, int]] | None = None):
        """layer_shapes: (KV heads, head_dim) of each layer; None: all (n_kv_heads, head_dim)."""
        super().__init__()
        layer_shapes = layer_shapes or [(n_kv_heads, head_dim)] * n_layers
        kinds = list(dict.fromkeys(layer_shapes))  # distinct shapes, first one first
        # layer -> (buffer group, index inside it); plain ints, fixed at build time (no tensor branching)
        self._where = [(kinds.index(s), layer_shapes[:i].count(s)) for i, s in enumerate(layer_shapes)]
        shapes = [(layer_shapes.count(s), batch, s[0], max_len, s[1]) for s in kinds]
        check_cache_budget((n_layers, batch, n_kv_heads, max_len, head_dim), dtype,
                           numel=sum(torch.Size(sh).numel() for sh in shapes))
        for g, shape in enumerate(shapes):
            suffix = "" if g == 0 else f"_{g}"
            self.register_buffer("k" + suffix, torch.zeros(shape, dtype=dtype, device=device), persistent=False)
            self.register_buffer("v" + suffix, torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.n_groups = len(shapes)
        self.register_buffer("pos", torch.zeros(batch, max_len, dtype=torch.long, device=device), persistent=False)
        # committed slots; a device tensor so that no host value leaks into the decode graph
        self.register_buffer("length", torch.zeros((), dtype=torch.long, device=device), persistent=False)

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def buffers_kv(self) -> list[Tensor]:
        return [getattr(self, n + ("" if g == 0 else f"_{g}")) for g in range(self.n_groups) for n in ("k", "v")]

    def layer_kv(self, layer: int) -> tuple[Tensor, Tensor]:
        """The [B, Hkv, S, Dh] K and V buffers of one layer (views)."""
        g, i = self._where[layer]
        suffix = "" if g == 0 else f"_{g}"
        return getattr(self, "k" + suffix)[i], getattr(self, "v" + suffix)[i]

    def update(self, layer: int, slots: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v [B, Hkv, T, Dh] at slots [T]; return the full buffers [B, Hkv, S, Dh]."""
        kb, vb = self.layer_kv(layer)
        kb.index_copy_(2, slots, k.to(kb.dtype))
        vb.index_copy_(2, slots, v.to(vb.dtype))
        return kb, vb

    def write_pos(self, slots: Tensor, pos: Tensor) -> Tensor:
        """Record the positions pos [B or 1, T] of slots [T]; return every slot's position [B, S]."""
        self.pos.index_copy_(1, slots, pos.expand(self.pos.shape[0], -1))
        return self.pos

    def reset(self) -> None:
        for t in self.buffers_kv():
            t.zero_()
        self.pos.zero_()
        self.length.zero_()
