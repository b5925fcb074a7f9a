"""Token selection and commit rules: small pure tensor functions with no host sync.

Each rule maps (conf [B, L], entropy [B, L], candidates [B, L] bool, step [B], n_valid [B]) to the
positions to commit [B, L] bool, a subset of candidates with at least one position per row that has
any candidate, so a block always finishes within L steps.
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.engine.config import DecodeConfig

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
    x = _mix((seed[:, None, None] & _M31) ^ 0x2545F491)
    x = _mix((x + step[:, None, None] * 0x3C6EF35) & _M31)
    x = _mix((x + pos * 0x1B873593) & _M31)
    x = _mix((x + tok * 0x5BD1E995) & _M31)
    return unit_interval(x)


def unit_interval(x: Tensor) -> Tensor:
    """31-bit hash -> float32 uniform strictly inside (0, 1): the top 23 bits, centred, are exact in
    fp32. (Dividing all 31 bits by 2**31 rounds the top 64 values to exactly 1.0, whose Gumbel noise
    is +inf: that token always wins, and on a banned token -inf + inf = NaN wins the argmax.)"""
    return ((x >> 8).float() + 0.5) / float(1 << 23)


def select_tokens(logits: Tensor, temperature: float, noise: Tensor | None,
                  entropy: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
    """logits [B, L, V] -> token [B, L], confidence p(token) [B, L], entropy [B, L] (nats; None when
    entropy=False: only the entropy rule and traces read it, and it costs a pass over [B, L, V]).
    Sampling is the Gumbel-max trick: argmax(logits / T + Gumbel), no multinomial, no sync."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    if temperature == 0.0 or noise is None:
        top, x = logp.max(-1)  # the first maximal index, as argmax; its value is log p(token)
    else:
        gumbel = -torch.log(-torch.log(noise))
        x = (logits.float() / temperature + gumbel).argmax(-1)
        top = logp.gather(-1, x[..., None]).squeeze(-1)
    conf = top.exp()
    ent = torch.special.entr(logp.exp()).sum(-1) if entropy else None  # entr(0) = 0: banned tokens have p = 0
    return x, conf, ent


def rank_desc(score: Tensor, candidates: Tensor) -> Tensor:
    """Rank [B, L] of each position by score, best first; non-candidates rank after all candidates."""
    s = torch.where(candidates, score, torch.full_like(score, float("-inf")))
    order = s.argsort(dim=-1, descending=True, stable=True)
    ar = torch.arange(s.shape[-1], device=s.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, ar)


def _top_n(candidates: Tensor, rank: Tensor, n: Tensor) -> Tensor:
    return candidates & (rank < n.clamp(min=1)[:, None])


def threshold_rule(conf: Tensor, candidates: Tensor, tau: float) -> Tensor:
    """Every candidate with conf >= tau, and at least the best one: rank 0 of rank_desc (the lower
    index among ties), found with an argmax instead of a sort (argmax returns the first maximum)."""
    best = conf.masked_fill(~candidates, float("-inf")).argmax(-1, keepdim=True)
    at_least_one = torch.zeros_like(candidates).scatter_(-1, best, True)
    return candidates & ((conf >= tau) | at_least_one)


def topk_rule(conf: Tensor, candidates: Tensor, step: Tensor, n_valid: Tensor, n_steps: int) -> Tensor:
    """LLaDA reference schedule: n_valid // S tokens per step, the first n_valid % S steps one more;
    the lowest-confidence positions stay masked."""
    k = n_valid // n_steps + (step < n_valid % n_steps).long()
    return _top_n(candidates, rank_desc(conf, candidates), k)


def factor_rule(conf: Tensor, candidates: Tensor, factor: float) -> Tensor:
    """Fast-dLLM factor rule: the largest n with (n + 1) * (1 - c_(n)) < f, c sorted descending."""
    rank = rank_desc(conf, candidates)
    ok = candidates & ((rank + 2).float() * (1 - conf) < factor)
    return _top_n(candidates, rank, ok.sum(-1))


def entropy_rule(entropy: Tensor, candidates: Tensor, bound: float) -> Tensor:
    """Entropy-bounded (EB) rule: most certain first while sum(H) - max(H) <= bound."""
    rank = rank_desc(-entropy, candidates)
    order = rank.argsort(dim=-1)
    h_sorted = entropy.gather(-1, order)
    cand_sorted = candidates.gather(-1, order)
    ok = cand_sorted & (h_sorted.cumsum(-1) - h_sorted <= bound)
    return _top_n(candidates, rank, ok.sum(-1))


def commit_positions(cfg: DecodeConfig, conf: Tensor, entropy: Tensor | None, candidates: Tensor,
                     step: Tensor, n_valid: Tensor) -> Tensor:
    """entropy may be None unless cfg.rule == 'entropy'."""
    if cfg.rule == "threshold":
        return threshold_rule(conf, candidates, cfg.threshold)
    if cfg.rule == "topk":
        return topk_rule(conf, candidates, step, n_valid, cfg.n_steps)
    if cfg.rule == "factor":
        return factor_rule(conf, candidates, cfg.factor)
    if cfg.rule == "entropy":
        return entropy_rule(entropy, candidates, cfg.entropy_bound)
    raise ValueError(f"unknown commit rule {cfg.rule!r}")
