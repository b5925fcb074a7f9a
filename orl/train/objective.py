"""The ORL objective on a replay batch: L = L_pred + lambda_aec * L_AEC + lambda_kl * L_KL."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from orl.model.vocab import SpecialIds, ban_tokens
from orl.model.model import Transformer
from orl.train.losses import aec_loss, gated_ce, kl_anchor, normalized_entropy, state_entropy
from orl.train.replay import ReplayBatch


@dataclass(frozen=True)
class LossWeights:
    lambda_aec: float = 1.0
    rho: float = 0.25
    lambda_kl: float = 0.1
    kl_cap: float = 1.0


def replay_logits(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds) -> Tensor:
    """Logits [R, T, V] of the packed rows, with the rollout's residual at unresolved positions and
    the engine's banned tokens, so a replayed state reproduces its rollout step."""
    w = next(model.parameters())  # `model` may be the DDP wrapper
    dev, dt = w.device, w.dtype
    logits = model(b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev), read_from=b.read_from.to(dev), mask_id=ids.mask,
                   z=b.z.to(dev, dt), a=b.a.to(dev, dt), unresolved=b.unresolved.to(dev), residual=residual)
    return ban_tokens(logits, ids.banned)


def response_counts(b: ReplayBatch) -> Tensor:
    """[3] responses that L_pred, L_AEC and L_KL each average over: those with an unresolved
    position, with a pair of adjacent states, with a confident position."""
    def responses(flags: Tensor, response: Tensor) -> Tensor:
        return (torch.zeros(b.n_responses, dtype=torch.long).index_add(0, response, flags.long()) > 0).sum()

    sel = b.noisy
    return torch.stack([responses(b.unresolved[sel], b.response[sel]),
                        responses(torch.ones_like(b.pair_response), b.pair_response),
                        responses(b.confident[sel], b.response[sel])])


def orl_loss(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds, w: LossWeights,
             ref_model: Transformer | None = None, norm: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """ref_model: the weights that produced the rollouts, when they differ from `model` (stale
    rollouts). With fresh rollouts the rollout distribution is the current one, detached.
    norm: response_counts summed over every process's batch (torchrun), so that each process's loss
    is its share of the mean over all responses; default: this batch's own counts."""
    logits = replay_logits(model, b, residual, ids)
    dev = logits.device
    n_pred, n_aec, n_kl = (None, None, None) if norm is None else norm.to(dev)
    sel = b.noisy.to(dev)
    lg = logits[sel]                                  # [N, V] noisy positions only
    resp = b.response.to(dev)[sel]
    unres = b.unresolved.to(dev)[sel]
    l_pred = gated_ce(lg, b.targets.to(dev)[sel], unres, resp, b.n_responses, n_pred)
    h = normalized_entropy(lg)
    h_state = state_entropy(h, unres, b.state_id.to(dev)[sel], b.n_states)
    l_aec = aec_loss(h_state, b.pair_src.to(dev), b.pair_next.to(dev), b.pair_response.to(dev), b.n_responses, w.rho,
                     n_aec)
    if ref_model is None:
        ref = lg.detach()
    else:
        with torch.no_grad():
            ref = replay_logits(ref_model, b, residual, ids)[sel]
    l_kl = kl_anchor(lg, ref, b.confident.to(dev)[sel], resp, b.n_responses, w.kl_cap, n_kl)
    total = l_pred + w.lambda_aec * l_aec + w.lambda_kl * l_kl
    return total, {"pred": l_pred.detach(), "aec": l_aec.detach(), "kl": l_kl.detach(),
                   "entropy": h_state.detach().mean() if b.n_states else h.sum().detach() * 0}
