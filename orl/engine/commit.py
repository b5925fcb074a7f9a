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
from orl.engine.sampling import hash_uniform


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


# ---------------------------------------------------------------- published decoders (issue 18 item 3)
# Their ranking scores (DecodeConfig.confidence) are computed from the logits by `rank_score`; the
# rules below see them as `conf`.

DREAM_EPS = 1e-3  # diffusion_generate's default eps: the last timestep of linspace(1, eps, steps + 1)


RANDOM_SALT = 0x5DEECE66D  # the 'random' scores' noise stream, apart from the sampling noise of the same seed


def rank_score(kind: str, logits: Tensor, x: Tensor, conf: Tensor, temperature: float | Tensor,
               seed: Tensor | None = None, step: Tensor | None = None) -> Tensor:
    """The score the rule ranks positions by. 'prob': conf, p(token) under the untempered model (LLaDA,
    and the engine's own rules). The others read the sampling distribution p = softmax(logits / T)
    (T = 0: softmax(logits)), as Dream's sample_tokens and SDAR's sampler do: 'sampled_prob' p(token),
    'margin' p_1 - p_2 (Dream topk_margin), 'neg_entropy' sum p log(p + 1e-10) (Dream entropy).
    'random': a uniform in (0, 1) per (row seed, step, position), from orl's counter-based noise (LLaDA's
    `random` remasking, Dream's `origin`; seed / step [B] are the rows' seeds and noise counters).
    x: the chosen tokens [B, L] (the argmax, or the Gumbel-max sample of that distribution). T may be
    a 0-d device tensor: no host value is read."""
    if kind == "prob":
        return conf
    if kind == "random":
        return hash_uniform(seed ^ RANDOM_SALT, step, conf.shape[-1], 1)[..., 0]
    if isinstance(temperature, Tensor):
        t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    else:
        t = temperature if temperature > 0 else 1.0
    p = torch.softmax(logits.float() / t, dim=-1)
    if kind == "sampled_prob":
        return p.gather(-1, x[..., None]).squeeze(-1)
    if kind == "margin":
        top2 = p.topk(2, dim=-1).values
        return top2[..., 0] - top2[..., 1]
    if kind == "neg_entropy":
        return (p * torch.log(p + 1e-10)).sum(-1)
    raise ValueError(f"unknown confidence {kind!r}")


def dream_timestep(i: Tensor, n_steps: int | Tensor) -> Tensor:
    """torch.linspace(1, eps, n_steps + 1)[i] in float32, bit for bit (the CPU kernel: a float32
    step, then start + step * i for the first half and end - step * (n - 1 - i) for the rest, each a
    fused multiply-add, i.e. one rounding: here the product and sum in float64, rounded once)."""
    one, eps = torch.ones((), dtype=torch.float32, device=i.device), torch.full((), DREAM_EPS, device=i.device)
    step = ((eps - one) / n_steps).double()
    n = n_steps + 1
    first = (one.double() + step * i.double()).float()
    last = (eps.double() - step * (n - 1 - i).double()).float()
    return torch.where(i < n // 2, first, last)


ALG_TEMP_SALT = 0x2B992DDFA  # alg_temp's noise stream, apart from sampling and 'random' of the same seed


def alg_temp_keys(score: Tensor, alg_temp: float | Tensor, seed: Tensor, step: Tensor) -> Tensor:
    """Dream's alg_temp (> 0): instead of the k best scores, k positions drawn without replacement from
    softmax(score / alg_temp) over the candidates (diffusion_generate's torch.multinomial). Drawn as
    Gumbel-top-k: the k largest score / alg_temp + Gumbel(u) are such a draw (each next pick is the
    Gumbel-max of the rest), so a rule that takes the k best keys takes it, with no host value and no
    generator state; u per (row seed, noise step, position) from orl's counter-based noise, its own
    stream. Unlike multinomial, weights that underflow to 0 in fp32 still rank (no 'not enough
    categories' error). score [B, L], seed / step [B] -> keys [B, L] float32."""
    u = hash_uniform(seed ^ ALG_TEMP_SALT, step, score.shape[-1], 1)[..., 0]
    return score.float() / alg_temp - torch.log(-torch.log(u))


def dream_rule(conf: Tensor, candidates: Tensor, step: Tensor, n_steps: int | Tensor) -> Tensor:
    """Dream diffusion_generate (maskgit_plus / topk_margin / entropy): at step i of S, with t, s =
    timesteps i, i + 1 of linspace(1, eps, S + 1), the int(m (1 - s / t)) best of the m masked
    positions (float32, truncated: a step may commit none); the last step (and any later) all."""
    t, s = dream_timestep(step, n_steps), dream_timestep(step + 1, n_steps)
    m = candidates.sum(-1)
    k = (m.float() * (1 - s / t)).long()
    k = torch.where(step >= n_steps - 1, m, k)
    return candidates & (rank_desc(conf, candidates) < k[:, None])


def dream_origin_rule(u: Tensor, candidates: Tensor, step: Tensor, n_steps: int | Tensor) -> Tensor:
    """Dream diffusion_generate alg='origin': each masked position independently with probability
    1 - s / t (u: its uniform, confidence 'random'); the last step (and any later) all."""
    t, s = dream_timestep(step, n_steps), dream_timestep(step + 1, n_steps)
    p = torch.where(step >= n_steps - 1, torch.ones_like(t), 1 - s / t)
    return candidates & (u < p[:, None])


def sdar_schedule(length: int, step: Tensor, n_steps: int | Tensor) -> Tensor:
    """SDAR get_num_transfer_tokens(block_length, steps)[step]: L // S each, the first L % S one more
    (of the block length, not of the masked count); past the last step: the whole block."""
    k = length // n_steps + (step < length % n_steps).long()
    return torch.where(step >= n_steps, torch.full_like(k, length), k)


def sdar_static_rule(conf: Tensor, candidates: Tensor, step: Tensor, n_steps: int | Tensor) -> Tensor:
    """SDAR low_confidence_static: the schedule's number of most confident masked positions."""
    k = sdar_schedule(conf.shape[-1], step, n_steps)
    return candidates & (rank_desc(conf, candidates) < k[:, None])


def above_or_top(conf: Tensor, candidates: Tensor, tau: float | Tensor, k: int | Tensor) -> Tensor:
    """Every candidate with conf > tau (strictly) when at least k (int, [] or [B]) of them are, else the
    k most confident (all candidates, if fewer): SDAR's low_confidence_dynamic, LLaDA2.1's mask-to-token."""
    k = k[..., None] if isinstance(k, Tensor) else k
    high = candidates & (conf > tau)
    top = candidates & (rank_desc(conf, candidates) < k)
    return torch.where(high.sum(-1, keepdim=True) >= k, high, top)


def sdar_dynamic_rule(conf: Tensor, candidates: Tensor, step: Tensor, n_steps: int | Tensor,
                      tau: float | Tensor) -> Tensor:
    """SDAR low_confidence_dynamic: every masked position with conf > tau (strictly) when there are at
    least the schedule's number of them, else that number of the most confident (a per-step floor)."""
    return above_or_top(conf, candidates, tau, sdar_schedule(conf.shape[-1], step, n_steps))


def llada21_edit_rule(conf: Tensor, x: Tensor, canvas: Tensor, editable: Tensor,
                      editing_threshold: float | Tensor) -> Tensor:
    """LLaDA2.1 token-to-token (T2T): every editable position (a committed answer token of the block,
    not a prompt token) whose proposal x differs from its token, with conf > editing_threshold (strictly)."""
    return editable & (x != canvas) & (conf > editing_threshold)


def fast_dllm_v2_rule(conf: Tensor, candidates: Tensor, tau: float | Tensor, sub: int | Tensor) -> Tensor:
    """Fast-dLLM v2 batch_sample: the block decodes in sub-blocks of `sub` in order; in the first
    sub-block that still holds a mask, every masked position with conf > tau (strictly) and at least the
    most confident (argmax: the lower index among ties)."""
    L = conf.shape[-1]
    sub_id = torch.arange(L, device=conf.device) // sub  # [L]
    current = torch.where(candidates, sub_id, L).amin(-1, keepdim=True)  # [B, 1]: L when none is masked
    cands = candidates & (sub_id == current)
    best = conf.masked_fill(~cands, float("-inf")).argmax(-1, keepdim=True)
    at_least_one = torch.zeros_like(cands).scatter_(-1, best, True)
    return cands & ((conf > tau) | at_least_one)


def commit_positions(cfg: DecodeConfig, conf: Tensor, entropy: Tensor | None, candidates: Tensor,
                     step: Tensor, n_valid: Tensor, knobs=None, seed: Tensor | None = None,
                     noise_step: Tensor | None = None) -> Tensor:
    """entropy may be None unless cfg.rule == 'entropy'. knobs (orl.engine.knobs.DeviceKnobs): read the
    rule's number from its device tensor instead of cfg (cfg then only chooses the rule). seed /
    noise_step [B]: the rows' seeds and noise counters, read by the rules that draw (rule 'dream' with
    cfg.alg_temp > 0; the full-sequence layout, where alg_temp is a Python value)."""
    k = knobs if knobs is not None else cfg
    if cfg.rule == "dream" and cfg.alg_temp > 0:
        return dream_rule(alg_temp_keys(conf, cfg.alg_temp, seed, noise_step), candidates, step, k.n_steps)
    if cfg.rule == "threshold":
        return threshold_rule(conf, candidates, k.threshold)
    if cfg.rule == "topk":
        return topk_rule(conf, candidates, step, n_valid, k.n_steps)
    if cfg.rule == "factor":
        return factor_rule(conf, candidates, k.factor)
    if cfg.rule == "entropy":
        return entropy_rule(entropy, candidates, k.entropy_bound)
    if cfg.rule == "dream":
        return dream_rule(conf, candidates, step, k.n_steps)
    if cfg.rule == "dream_origin":
        return dream_origin_rule(conf, candidates, step, k.n_steps)
    if cfg.rule == "sdar_static":
        return sdar_static_rule(conf, candidates, step, k.n_steps)
    if cfg.rule == "sdar_dynamic":
        return sdar_dynamic_rule(conf, candidates, step, k.n_steps, k.threshold)
    if cfg.rule == "llada21":  # its mask-to-token half; the token-to-token edits: llada21_edit_rule
        return above_or_top(conf, candidates, k.threshold, k.num_to_transfer)
    if cfg.rule == "fast_dllm_v2":
        return fast_dllm_v2_rule(conf, candidates, k.threshold, k.small_block_size)
    raise ValueError(f"unknown commit rule {cfg.rule!r}")
