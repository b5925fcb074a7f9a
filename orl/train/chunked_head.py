"""Per-position statistics of a large-vocabulary head, a chunk of positions at a time.

ORL's losses read, at each unresolved position, functions of the whole distribution (cross-entropy,
entropy, a KL to the rollout's distribution), and L_AEC is not linear in them, so the gradients cannot
be folded into the forward as orl/train/chunked_ce.py does for a weighted cross-entropy. Here the
forward computes the [N, k] statistics chunk by chunk without keeping any [chunk, V] tensor, and the
backward recomputes each chunk's logits and back-propagates the incoming [chunk, k] gradient through
the same functions with autograd: at most one chunk's [chunk, V] buffers exist at a time, for one
more head matmul per position. What autograd keeps between forward and backward is h [N, D].
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Read = Callable[[Tensor, Tensor], Tensor]          # (h [c, D], weight [V, D]) -> logits [c, V]
Stats = Callable[[Tensor, slice], Tensor]          # (logits [c, V], the chunk's rows) -> [c, k]


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, read: Read, stats: Stats, chunk: int) -> Tensor:
        ctx.save_for_backward(h, weight)
        ctx.read, ctx.stats, ctx.chunk = read, stats, chunk
        with torch.no_grad():
            return torch.cat([stats(read(h[s:s + chunk], weight), slice(s, s + chunk))
                              for s in range(0, max(h.shape[0], 1), chunk)])  # N = 0: one empty chunk

    @staticmethod
    def backward(ctx, grad: Tensor):
        h, weight = ctx.saved_tensors
        need_w = ctx.needs_input_grad[1]
        grad_h = torch.zeros_like(h)
        grad_w = torch.zeros_like(weight) if need_w else None
        for s in range(0, max(h.shape[0], 1), ctx.chunk):
            rows = slice(s, s + ctx.chunk)
            with torch.enable_grad():
                hc = h[rows].detach().requires_grad_()
                w = weight.detach().requires_grad_(need_w)
                out = ctx.stats(ctx.read(hc, w), rows)
                grads = torch.autograd.grad(out, (hc, w) if need_w else (hc,), grad[rows], allow_unused=True)
            grad_h[rows] = grads[0]
            if need_w and grads[1] is not None:
                grad_w += grads[1]
        return grad_h, grad_w, None, None, None


def chunked_head(h: Tensor, weight: Tensor, read: Read, stats: Stats, chunk: int = 64) -> Tensor:
    """stats(read(h, weight), rows) for h [N, D], computed `chunk` rows at a time -> [N, k], with
    gradients to h and weight. `stats` is called with each chunk's rows, to index per-position inputs."""
    if chunk <= 0:
        raise ValueError(f"chunk must be > 0, got {chunk}")
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"expected h [N, D] and weight [V, D], got {tuple(h.shape)} and {tuple(weight.shape)}")
    return _ChunkedHead.apply(h, weight, read, stats, chunk)


def capped_kl_sum(core, h: Tensor, ref_h: Tensor, ref_weight: Tensor, w: Tensor, cap: float, chunk: int = 256) -> Tensor:
    """sum_i w_i * min(KL(p_i || q_i), cap) for h, ref_h [N, D] (the model's and a frozen reference's final hidden
    states at the same positions) read out by `core`'s head and by ref_weight with core's soft-capping, chunk by chunk;
    gradients reach h and core's head only (the AR-path anchors of the draft recipe and of ORL)."""
    from orl.train.losses import capped_reverse_kl

    def read(x: Tensor, weight: Tensor) -> Tensor:  # the reference is of the same family
        return core.softcap((x.to(weight.dtype) @ weight.T).float())

    def stats(logits: Tensor, rows: slice) -> Tensor:
        with torch.no_grad():
            ref_logits = read(ref_h[rows], ref_weight)
        return (capped_reverse_kl(logits, ref_logits, cap) * w[rows])[:, None]

    return chunked_head(h, core.lm_head.weight, read, stats, chunk).sum()
