"""Residual context: the previous denoising step's prediction carried into the next (DESIGN section 2).

The state carried between steps is the soft embedding z [B, L, D] (never the [B, L, V] probabilities)
and, for RCD mode, the normalised entropy a [B, L]. A cold start is z = 0, a = 0 and gives exactly
the plain model in every mode.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

RESIDUAL_MODES = ("off", "rcd", "adapter")


def residual_state(logits: Tensor, embedding: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """logits [B, L, V], input codebook [V, D] -> (z [B, L, D], a [B, L])."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    p = logp.exp()
    a = torch.special.entr(p).sum(-1) / math.log(logits.shape[-1])  # entr(0) = 0 for banned tokens
    z = (p.to(embedding.dtype) @ embedding)
    return z, a.to(embedding.dtype)


class RMSNorm(nn.Module):
    """unit_offset (Gemma): the scale is 1 + weight, the weight stored zero-centred, and the product is
    taken in fp32 before the cast back (transformers' Gemma3RMSNorm); otherwise Llama/Qwen's order,
    or with fp32_scale the product in fp32 (Gemma 4). with_scale=False: no weight at all (Gemma 4's
    v_norm, router norm and self-conditioning post-norm)."""

    def __init__(self, dim: int, eps: float = 1e-6, unit_offset: bool = False, *, with_scale: bool = True,
                 fp32_scale: bool = False):
        super().__init__()
        self.eps, self.unit_offset, self.fp32_scale = eps, unit_offset, fp32_scale
        if with_scale:
            self.weight = nn.Parameter(torch.zeros(dim) if unit_offset else torch.ones(dim))
        else:
            self.weight = None

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is None:
            return x.to(dtype)
        if self.unit_offset:
            return (x * (1.0 + self.weight.float())).to(dtype)
        if self.fp32_scale:
            return (x * self.weight.float()).to(dtype)
        return self.weight * x.to(dtype)


class ResidualAdapter(nn.Module):
    """g_phi: pre-RMSNorm gated MLP with a zero-initialised down projection (untrained == identity)."""

    def __init__(self, dim: int, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.norm = RMSNorm(dim, eps)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        nn.init.zeros_(self.down_proj.weight)

    def forward(self, z: Tensor) -> Tensor:
        h = self.norm(z)
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def residual_inputs(tok_emb: Tensor, mask_emb: Tensor, z: Tensor, a: Tensor, unresolved: Tensor,
                    mode: str, adapter: ResidualAdapter | None, alpha: float) -> Tensor:
    """Token embeddings [B, T, D] -> inputs with residual context at unresolved positions.

    rcd:     e = (1 - a) E[mask] + a z
    adapter: e = E[x] + alpha * g_phi(stopgrad(z))
    """
    if mode == "off":
        return tok_emb
    if mode == "rcd":
        if mask_emb is None:
            raise ValueError("residual mode 'rcd' needs the mask token's embedding (pass mask_id)")
        a = a[..., None].to(tok_emb.dtype)
        res = (1 - a) * mask_emb + a * z.to(tok_emb.dtype)
    elif mode == "adapter":
        if adapter is None:
            raise ValueError("residual mode 'adapter' needs a model with adapter weights (adapter_dim > 0)")
        res = tok_emb + alpha * adapter(z.detach().to(tok_emb.dtype))
    else:
        raise ValueError(f"unknown residual mode {mode!r}; expected one of {RESIDUAL_MODES}")
    return torch.where(unresolved[..., None], res, tok_emb)
