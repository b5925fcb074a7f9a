"""ORL losses (DESIGN section 4): pure tensor functions, normalised per response, on device.

Every loss is first averaged within a response (over its positions, states or state pairs), then
over responses, so a response that took many denoising steps does not outweigh a fast one.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def per_response_mean(values: Tensor, weight: Tensor, response: Tensor, n_responses: int,
                      count: Tensor | None = None) -> Tensor:
    """values, weight, response [N] -> mean over responses (with weight > 0) of their weighted mean.
    count: the number of responses to average over when they are spread over several processes
    (default: the responses here with weight > 0)."""
    w = weight.to(values.dtype)
    num = torch.zeros(n_responses, dtype=values.dtype, device=values.device).index_add(0, response, values * w)
    den = torch.zeros(n_responses, dtype=values.dtype, device=values.device).index_add(0, response, w)
    has = den > 0
    per = num / den.clamp(min=1e-12)
    return (per * has).sum() / (has.sum() if count is None else count).clamp(min=1)


def _finite(x: Tensor, like: Tensor) -> Tensor:
    """Zero where `like` is -inf (banned tokens: p = 0), so that neither the value nor the gradient
    meets 0 * inf: entr() and p * log p have an infinite derivative at p = 0."""
    return x.masked_fill(torch.isinf(like), 0.0)


def normalized_entropy(logits: Tensor) -> Tensor:
    """logits [..., V] -> H(softmax) / log V in [0, 1]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * _finite(logp, logp)).sum(-1) / math.log(logits.shape[-1])


IGNORE = -100  # a target position no loss reads (F.cross_entropy's ignore_index): past a rollout's stop string


def gated_ce(logits: Tensor, targets: Tensor, unresolved: Tensor, response: Tensor, n_responses: int,
             count: Tensor | None = None) -> Tensor:
    """L_pred: cross-entropy to the verified tokens at positions unresolved in the state.
    logits [N, V], targets / unresolved / response [N] (N = flattened noisy positions)."""
    ce = F.cross_entropy(logits.float(), targets, reduction="none", ignore_index=IGNORE)
    return per_response_mean(ce, unresolved & (targets != IGNORE), response, n_responses, count)


def state_entropy(h: Tensor, unresolved: Tensor, state: Tensor, n_states: int) -> Tensor:
    """Hbar per state: mean normalised entropy over the state's own unresolved positions.
    h, unresolved, state [N] -> [n_states]."""
    w = unresolved.to(h.dtype)
    num = torch.zeros(n_states, dtype=h.dtype, device=h.device).index_add(0, state, h * w)
    den = torch.zeros(n_states, dtype=h.dtype, device=h.device).index_add(0, state, w)
    return num / den.clamp(min=1e-12)


def aec_pairs(h_src: Tensor, h_next: Tensor, rho: float) -> Tensor:
    """Adjacent Entropy Contraction per pair: max(0, H(k+1) - (1 - rho) * stopgrad(H(k)))^2.
    Worked example (DESIGN): rho 0.25, source 0.40, next 0.36 -> 0.0036; next 0.30 -> 0."""
    return F.relu(h_next - (1.0 - rho) * h_src.detach()).pow(2)


def aec_loss(h_state: Tensor, src: Tensor, nxt: Tensor, pair_response: Tensor, n_responses: int, rho: float,
             count: Tensor | None = None) -> Tensor:
    """h_state [S]; src, nxt, pair_response [P] index adjacent states k -> k+1 of one block."""
    if src.numel() == 0:
        return h_state.sum() * 0.0
    per_pair = aec_pairs(h_state[src], h_state[nxt], rho)
    return per_response_mean(per_pair, torch.ones_like(per_pair), pair_response, n_responses, count)


def certainty_forcing(h: Tensor, right: Tensor, verified: Tensor, response: Tensor, n_responses: int,
                      count: Tensor | None = None) -> Tensor:
    """L_CF (dParallel's certainty forcing): normalised entropy at unresolved positions whose argmax is already
    the verified token, so the model grows sure where it is right (more positions pass a commit threshold)
    and never where it is wrong. Each response's mean over those positions, averaged over the responses L_pred
    averages over (`count`; default: those with a verified position here); a response with none adds 0.
    h, right, verified, response [N]."""
    if count is None:
        count = (torch.zeros(n_responses, dtype=torch.long, device=h.device).index_add(0, response, verified.long())
                 > 0).sum()
    return per_response_mean(h, right & verified, response, n_responses, count)


def capped_reverse_kl(logits: Tensor, ref_logits: Tensor, cap: float) -> Tensor:
    """min(KL(p_theta || p_rollout), cap) per position; logits, ref_logits [N, V] -> [N]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    logq = F.log_softmax(ref_logits.float(), dim=-1).detach()
    # banned tokens are -inf in both: they carry no mass and must not produce inf - inf
    return (logp.exp() * _finite(logp - logq, logp)).sum(-1).clamp(max=cap)


def kl_anchor(logits: Tensor, ref_logits: Tensor, confident: Tensor, response: Tensor, n_responses: int,
              cap: float, count: Tensor | None = None) -> Tensor:
    """L_KL on positions the rollout was already confident about (per-response mean)."""
    return per_response_mean(capped_reverse_kl(logits, ref_logits, cap), confident, response, n_responses, count)
