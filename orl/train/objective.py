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


def replay_logits(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds,
                  at: Tensor | None = None) -> Tensor:
    """Logits [R, T, V] of the packed rows, with the rollout's residual at unresolved positions and
    the engine's banned tokens, so a replayed state reproduces its rollout step.
    at [R, T] bool: only those positions' logits, [N, V] in row-major order: the body runs on every
    token, the head only where a loss reads (a 262k vocabulary makes [R, T, V] the largest tensor)."""
    core = getattr(model, "module", model)  # `model` may be the DDP wrapper
    w = next(core.parameters())
    dev, dt = w.device, w.dtype
    h = model(b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev), mask_id=ids.mask, z=b.z.to(dev, dt), a=b.a.to(dev, dt),
              unresolved=b.unresolved.to(dev), residual=residual, return_hidden=True)
    read_from = b.read_from.to(dev)
    if at is None:
        logits = core.read_out(h, read_from)
    else:
        r, t = (i.to(dev) for i in at.cpu().nonzero(as_tuple=True))  # host-built metadata: no device sync
        src = read_from[r, t] if core.args.shift_logits else t  # the shifted read-out's source position
        logits = core.read_out(h[r, src][None])[0]
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
    rollouts). With fresh rollouts (None) the rollout distribution is the current one: L_KL is 0.
    norm: response_counts summed over every process's batch (torchrun), so that each process's loss
    is its share of the mean over all responses; default: this batch's own counts."""
    # every loss term reads only unresolved positions (L_KL's confident ones are a subset), so the
    # head runs there alone: [N_unresolved, V] logits, not [R, T, V]
    sel = b.unresolved
    lg = replay_logits(model, b, residual, ids, at=sel)  # [N, V]
    dev = lg.device
    n_pred, n_aec, n_kl = (None, None, None) if norm is None else norm.to(dev)
    resp = b.response[sel].to(dev)  # the batch is built on the host: select there, then move
    unres = torch.ones_like(resp, dtype=torch.bool)
    l_pred = gated_ce(lg, b.targets[sel].to(dev), unres, resp, b.n_responses, n_pred)
    h = normalized_entropy(lg)
    h_state = state_entropy(h, unres, b.state_id[sel].to(dev), b.n_states)
    l_aec = aec_loss(h_state, b.pair_src.to(dev), b.pair_next.to(dev), b.pair_response.to(dev), b.n_responses, w.rho,
                     n_aec)
    if ref_model is None:
        # fresh rollouts: the rollout distribution is this one, and KL(p || stopgrad p) is 0 with a zero
        # gradient; not computing it saves three [N, V] buffers autograd would keep (docs/TRAINING.md)
        l_kl = lg.new_zeros(())
    else:
        with torch.no_grad():
            ref = replay_logits(ref_model, b, residual, ids, at=b.unresolved)
        l_kl = kl_anchor(lg, ref, b.confident[sel].to(dev), resp, b.n_responses, w.kl_cap, n_kl)
    total = l_pred + w.lambda_aec * l_aec + w.lambda_kl * l_kl
    return total, {"pred": l_pred.detach(), "aec": l_aec.detach(), "kl": l_kl.detach(),
                   "entropy": h_state.detach().mean() if b.n_states else h.sum().detach() * 0}
