"""Head + cross-entropy over a large vocabulary, a chunk of positions at a time.

A 262k vocabulary makes the logits of even a short batch huge ([tokens, 262144] fp32 is 1 MiB per
token), and autograd would keep every chunk's logits alive until backward. So the loss is one
autograd Function that, chunk by chunk, computes the logits, the loss and both gradients (d hidden,
d head weight) in its forward, and keeps only the gradients: at most [chunk, V] logits exist at any
time, and the head costs three matmuls per position (forward, d hidden, d weight), not four as with
recomputation. A frozen head (tied, frozen embeddings) skips the d weight matmul.

Under bf16 a training step casts the head once (`one_cast_per_head`), not on every call: a [262144, 640]
fp32 -> bf16 copy costs about as much as the matmuls it feeds on a CPU, and a conversion step makes about ten
calls (each micro-batch's losses, the draft targets' argmax) with a head that changes only at the optimizer step.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor


class _Casts:
    depth = 0
    held: dict = {}  # (id(weight), dtype) -> (weight, its cast): the weight held, so its id is not reused


@contextmanager
def one_cast_per_head():
    """Within it, cast_head casts each head once per dtype and reuses the copy; the copies are dropped on exit.
    The caller vouches that no head changes inside (one training step's forwards and backwards: the optimizer
    step comes after the scope)."""
    _Casts.depth += 1
    try:
        yield
    finally:
        _Casts.depth -= 1
        if not _Casts.depth:
            _Casts.held.clear()


def cast_head(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """weight in dtype, detached: the scope's copy within one_cast_per_head, else a fresh cast."""
    if weight.dtype == dtype:
        return weight.detach()
    if not _Casts.depth:
        return weight.detach().to(dtype)
    key = (id(weight), dtype)
    if key not in _Casts.held:  # the scope holds the weight, so no other tensor gets its id before the exit
        _Casts.held[key] = (weight, weight.detach().to(dtype))
    return _Casts.held[key][1]


class _LinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, targets: Tensor, w: Tensor, chunk: int,
                softcap: float | None, dtype: torch.dtype) -> Tensor:
        need_w = ctx.needs_input_grad[1]
        W = cast_head(weight, dtype)  # not per chunk; within one_cast_per_head not per call either
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        rows = torch.arange(min(chunk, h.shape[0]), device=h.device)
        for s in range(0, h.shape[0], chunk):
            hc, tc, wc = h[s:s + chunk].to(dtype), targets[s:s + chunk], w[s:s + chunk].float()
            logits = (hc @ W.T).float()  # [c, V]: the only vocabulary-sized tensor
            if softcap:
                th = torch.tanh(logits / softcap)
                logits = th * softcap
            lse = torch.logsumexp(logits, -1)
            r = rows[: hc.shape[0]]
            total += ((lse - logits[r, tc]) * wc).sum()
            # d CE / d logits = softmax - onehot, times the position's weight (in place: logits is dead)
            g = logits.sub_(lse[:, None]).exp_()
            g[r, tc] -= 1.0
            g.mul_(wc[:, None])
            if softcap:
                g.mul_(1.0 - th * th)
            g = g.to(dtype)
            grad_h[s:s + chunk] = (g @ W).to(h.dtype)
            if need_w:
                grad_w += (g.T @ hc).float()  # accumulated in fp32 across chunks
        ctx.save_for_backward(grad_h, grad_w if need_w else torch.empty(0))
        ctx.need_w = need_w
        ctx.w_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, go: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        gw = (grad_w * go).to(ctx.w_dtype) if ctx.need_w else None
        return grad_h * go.to(grad_h.dtype), gw, None, None, None, None, None


def chunked_ce_sum(h: Tensor, weight: Tensor, targets: Tensor, w: Tensor, chunk: int = 256,
                   softcap: float | None = None, dtype: torch.dtype | None = None) -> Tensor:
    """sum_i w_i * CE(softcap(h_i @ weight.T), targets_i) for h [N, D], weight [V, D], targets, w [N].

    dtype: the matmul dtype (bf16 under autocast; default h's); softmax and the loss are fp32."""
    if chunk <= 0:
        raise ValueError(f"chunk must be > 0, got {chunk}")
    if h.dim() != 2 or targets.shape != h.shape[:1] or w.shape != h.shape[:1]:
        raise ValueError(f"expected h [N, D], targets [N], w [N]; got {tuple(h.shape)}, {tuple(targets.shape)}, "
                         f"{tuple(w.shape)}")
    if dtype is None:
        dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else h.dtype
    return _LinearCE.apply(h, weight, targets, w, chunk, softcap, dtype)


@torch.no_grad()
def chunked_predict(h: Tensor, weight: Tensor, targets: Tensor, chunk: int = 256,
                    softcap: float | None = None) -> tuple[Tensor, Tensor]:
    """Per position cross-entropy [N] and argmax [N] of h @ weight.T, chunk by chunk (evaluation)."""
    ce, top = [], []
    # under autocast the matmul is in its dtype: the head cast by cast_head, not per chunk by autocast
    W = cast_head(weight, torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type)
                  else weight.dtype)
    for s in range(0, h.shape[0], chunk):
        logits = (h[s:s + chunk].to(W.dtype) @ W.T).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        ce.append(torch.logsumexp(logits, -1) - logits.gather(1, targets[s:s + chunk, None])[:, 0])
        top.append(logits.argmax(-1))
    return torch.cat(ce), torch.cat(top)
