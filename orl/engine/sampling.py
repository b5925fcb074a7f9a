"""Token selection: log-probabilities, confidence, entropy, and sampling by Gumbel-max with
counter-based noise. Small pure tensor functions with no host sync, shared by the diffusion step
(orl.engine.decode) and the AR decoder (orl.engine.ar)."""
from __future__ import annotations

import torch
from torch import Tensor

_M31 = (1 << 31) - 1


def _mix(x: Tensor) -> Tensor:
    # integer hash kept below 2**31 so int64 products never overflow
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & _M31
    x = ((x ^ (x >> 12)) * 0x297A2D39) & _M31
    return x ^ (x >> 15)


def hash_uniform(seed: Tensor, step: Tensor, length: int, vocab: int) -> Tensor:
    """Counter-based uniform noise in (0, 1), shape [B, L, V]: a pure function of (seed [B], step [B],
    position, token). Sampling needs no generator state, so it is reproducible, compile- and
    graph-safe, and a row's samples do not depend on the rest of its batch; the seed is a device
    tensor, so one captured graph serves every seed."""
    dev = step.device
    pos = torch.arange(length, device=dev)[None, :, None]
    tok = torch.arange(vocab, device=dev)[None, None, :]
    s = seed[:, None, None]
    x = _mix((s & _M31) ^ 0x2545F491)
    # bits 31..63 of the seed count too (seed 2 and 2**31 + 2 differ); seeds in [0, 2**31) keep their old noise
    high = _mix((x + ((s >> 31) & _M31) * 0x6A09E667 + ((s >> 62) & 3) * 0x3C6EF372) & _M31)
    x = torch.where((s >> 31) == 0, x, high)
    x = _mix((x + step[:, None, None] * 0x3C6EF35) & _M31)
    x = _mix((x + pos * 0x1B873593) & _M31)
    x = _mix((x + tok * 0x5BD1E995) & _M31)
    return unit_interval(x)


def unit_interval(x: Tensor) -> Tensor:
    """31-bit hash -> float32 uniform strictly inside (0, 1): the top 23 bits, centred, are exact in
    fp32. (Dividing all 31 bits by 2**31 rounds the top 64 values to exactly 1.0, whose Gumbel noise
    is +inf: that token always wins, and on a banned token -inf + inf = NaN wins the argmax.)"""
    return ((x >> 8).float() + 0.5) / float(1 << 23)


def select_tokens(logits: Tensor, temperature: float | Tensor, noise: Tensor | None,
                  entropy: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
    """logits [B, L, V] -> token [B, L], confidence p(token) [B, L], entropy [B, L] (nats; None when
    entropy=False: only the entropy rule and traces read it, and it costs a pass over [B, L, V]).
    Sampling is the Gumbel-max trick: argmax(logits / T + Gumbel), no multinomial, no sync.
    Greedy when noise is None (or T is the Python 0.0); T may be a 0-d device tensor (the engine's
    DeviceKnobs), which is never compared on the host."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    if noise is None or (not isinstance(temperature, Tensor) and temperature == 0.0):
        top, x = logp.max(-1)  # the first maximal index, as argmax; its value is log p(token)
    else:
        gumbel = -torch.log(-torch.log(noise))
        x = (logits.float() / temperature + gumbel).argmax(-1)
        top = logp.gather(-1, x[..., None]).squeeze(-1)
    conf = top.exp()
    ent = torch.special.entr(logp.exp()).sum(-1) if entropy else None  # entr(0) = 0: banned tokens have p = 0
    return x, conf, ent


def top_k_top_p(logits: Tensor, temperature: float | Tensor, top_k: int | Tensor, top_p: float | Tensor) -> Tensor:
    """Logits [B, L, V] with the tokens outside the top-k / nucleus of softmax(logits / T) at -inf:
    top_k first (ties with the k-th value stay), then top_p over what is left (the smallest prefix of
    the sorted distribution whose mass exceeds p, the first token always kept), as LLaDA2.x's and SDAR's
    samplers order them. top_k 0 and top_p 1 switch a filter off. Static shapes, no host value: k and p
    may be 0-d device tensors (one sort serves both filters)."""
    V = logits.shape[-1]
    if isinstance(temperature, Tensor):
        t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    else:
        t = temperature if temperature > 0 else 1.0
    scaled = logits.float() / t
    values, order = scaled.sort(-1, descending=True)
    if isinstance(top_k, Tensor):
        idx = (torch.where(top_k > 0, top_k, V).clamp(max=V) - 1).expand(*values.shape[:-1], 1)
    else:
        idx = torch.full((*values.shape[:-1], 1), min(top_k if top_k > 0 else V, V) - 1, device=logits.device)
    kth = values.gather(-1, idx)  # [B, L, 1]: the k-th largest scaled logit
    values = values.masked_fill(values < kth, float("-inf"))
    over = torch.softmax(values, -1).cumsum(-1) > top_p  # sorted: the mass before a token exceeds p
    over = torch.cat([torch.zeros_like(over[..., :1]), over[..., :-1]], -1) & (top_p < 1)
    drop = torch.zeros_like(over).scatter_(-1, order, over)
    return logits.masked_fill((scaled < kth) | drop, float("-inf"))


def top_p_then_top_k(logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    """Dream's order (sample_tokens: top_p_logits, then top_k_logits), for the full-sequence layout:
    the nucleus of mass p of softmax(logits / T) (T = 0: of softmax(logits); the first token always
    kept), then of what it left the tokens at or above its k-th largest value (k beyond what the nucleus
    left: no further cut). Unlike `top_k_top_p` the nucleus is taken over the whole distribution, so
    k = 2, p = 0.55 on p = (.5, .3, .15, .05) keeps two tokens here and one there. Logits [B, L, V]
    with the dropped tokens at -inf; no host value read (k and p are Python numbers: this layout runs
    eagerly)."""
    V = logits.shape[-1]
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    values, order = scaled.sort(-1, descending=True)
    over = torch.softmax(values, -1).cumsum(-1) > top_p
    # a token is dropped when the mass before it already exceeds p; top_p 1 keeps all
    drop = torch.cat([torch.zeros_like(over[..., :1]), over[..., :-1]], -1) & (top_p < 1)
    if top_k > 0:
        kth = values.masked_fill(drop, float("-inf"))[..., min(top_k, V) - 1:min(top_k, V)]  # [B, L, 1]
        drop = drop | (values < kth)
    return logits.masked_fill(torch.zeros_like(drop).scatter_(-1, order, drop), float("-inf"))
