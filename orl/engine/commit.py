"""Commit rules: which proposed tokens a denoising step fixes. Small pure tensor functions with no
host sync (token selection itself is orl.engine.sampling).

Each rule maps (conf [B, L], entropy [B, L], candidates [B, L] bool, step [B], n_valid [B]) to the
positions to commit [B, L] bool, a subset of candidates with at least one position per row that has
any candidate, so a block always finishes within L steps. The rules' numbers (tau, f, the bound, the
steps) may be Python values or 0-d device tensors (the engine's DeviceKnobs: one captured graph
serves every value); a float32 tensor compares exactly like the Python float it was filled from.
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.engine.config import DecodeConfig


def rank_desc(score: Tensor, candidates: Tensor) -> Tensor:
    """Rank [B, L] of each position by score, best first; non-candidates rank after all candidates."""
    s = torch.where(candidates, score, torch.full_like(score, float("-inf")))
    order = s.argsort(dim=-1, descending=True, stable=True)
    ar = torch.arange(s.shape[-1], device=s.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, ar)


def _top_n(candidates: Tensor, rank: Tensor, n: Tensor) -> Tensor:
    return candidates & (rank < n.clamp(min=1)[:, None])


def threshold_rule(conf: Tensor, candidates: Tensor, tau: float | Tensor) -> Tensor:
    """Every candidate with conf >= tau, and at least the best one: rank 0 of rank_desc (the lower
    index among ties), found with an argmax instead of a sort (argmax returns the first maximum)."""
    best = conf.masked_fill(~candidates, float("-inf")).argmax(-1, keepdim=True)
    at_least_one = torch.zeros_like(candidates).scatter_(-1, best, True)
    return candidates & ((conf >= tau) | at_least_one)


def topk_rule(conf: Tensor, candidates: Tensor, step: Tensor, n_valid: Tensor, n_steps: int | Tensor) -> Tensor:
    """LLaDA reference schedule: n_valid // S tokens per step, the first n_valid % S steps one more;
    the lowest-confidence positions stay masked."""
    k = n_valid // n_steps + (step < n_valid % n_steps).long()
    return _top_n(candidates, rank_desc(conf, candidates), k)


def factor_rule(conf: Tensor, candidates: Tensor, factor: float | Tensor) -> Tensor:
    """Fast-dLLM factor rule: the largest n with (n + 1) * (1 - c_(n)) < f, c sorted descending."""
    rank = rank_desc(conf, candidates)
    ok = candidates & ((rank + 2).float() * (1 - conf) < factor)
    return _top_n(candidates, rank, ok.sum(-1))


def entropy_rule(entropy: Tensor, candidates: Tensor, bound: float | Tensor) -> Tensor:
    """Entropy-bounded (EB) rule: most certain first while sum(H) - max(H) <= bound."""
    rank = rank_desc(-entropy, candidates)
    order = rank.argsort(dim=-1)
    h_sorted = entropy.gather(-1, order)
    cand_sorted = candidates.gather(-1, order)
    ok = cand_sorted & (h_sorted.cumsum(-1) - h_sorted <= bound)
    return _top_n(candidates, rank, ok.sum(-1))


def commit_positions(cfg: DecodeConfig, conf: Tensor, entropy: Tensor | None, candidates: Tensor,
                     step: Tensor, n_valid: Tensor, knobs=None) -> Tensor:
    """entropy may be None unless cfg.rule == 'entropy'. knobs (orl.engine.knobs.DeviceKnobs): read the
    rule's number from its device tensor instead of cfg (cfg then only chooses the rule)."""
    k = knobs if knobs is not None else cfg
    if cfg.rule == "threshold":
        return threshold_rule(conf, candidates, k.threshold)
    if cfg.rule == "topk":
        return topk_rule(conf, candidates, step, n_valid, k.n_steps)
    if cfg.rule == "factor":
        return factor_rule(conf, candidates, k.factor)
    if cfg.rule == "entropy":
        return entropy_rule(entropy, candidates, k.entropy_bound)
    raise ValueError(f"unknown commit rule {cfg.rule!r}")
