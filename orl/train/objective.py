"""The ORL objective on a replay batch: L = L_pred + lambda_aec * L_AEC + lambda_kl * L_KL (+ lambda_cf * L_CF,
certainty forcing, off by default)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from orl.model.vocab import SpecialIds, ban_tokens
from orl.model.model import Transformer
from orl.train.chunked_head import chunked_head
from orl.train.losses import (IGNORE, aec_loss, capped_reverse_kl, certainty_forcing, normalized_entropy,
                              per_response_mean, state_entropy)
from orl.train.replay import ReplayBatch

HEAD_CHUNK = 64  # unresolved positions per head chunk: [64, V] fp32 is 64 MiB at a 262k vocabulary


@dataclass(frozen=True)
class LossWeights:
    lambda_aec: float = 1.0
    rho: float = 0.25
    lambda_kl: float = 0.1
    kl_cap: float = 1.0
    lambda_ar: float = 0.0     # next-token loss on the kept rollouts (orl.train.ar_anchor; 0: off)
    lambda_ar_kl: float = 0.0  # min(KL(AR path || the base's), kl_cap) on every rollout (orl.train.ar_anchor; 0: off)
    lambda_cf: float = 0.0     # certainty forcing (dParallel): entropy where the argmax is already the target (0: off)


def replay_hidden(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds,
                  at: Tensor | None = None) -> Tensor:
    """Final hidden states of the packed rows, with the rollout's residual at unresolved positions:
    [R, T, D] in read-out order (a shifted model's position t reads its predecessor's state), or with
    `at` [R, T] bool only those positions' [N, D], row-major."""
    core = getattr(model, "module", model)  # `model` may be the DDP wrapper
    w = next(core.parameters())
    dev, dt = w.device, w.dtype
    h = model(b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev), mask_id=ids.mask, z=b.z.to(dev, dt), a=b.a.to(dev, dt),
              unresolved=b.unresolved.to(dev), residual=residual, return_hidden=True)
    src = b.read_from if core.args.shift_logits else torch.arange(h.shape[1]).expand(h.shape[:2])
    if at is None:
        return h.gather(1, src.to(dev)[..., None].expand(h.shape))
    r, t = at.cpu().nonzero(as_tuple=True)  # host-built metadata: no device sync
    return h[r.to(dev), src[r, t].to(dev)]


def replay_logits(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds,
                  at: Tensor | None = None) -> Tensor:
    """Logits [R, T, V] (or [N, V] at `at`) with the engine's banned tokens, so a replayed state
    reproduces its rollout step. Whole rows: for checks; the objective reads out chunk by chunk."""
    core = getattr(model, "module", model)
    return ban_tokens(core.read_out(replay_hidden(model, b, residual, ids, at)), ids.banned)


def response_counts(b: ReplayBatch) -> Tensor:
    """[3] responses that L_pred, L_AEC and L_KL each average over: those with an unresolved
    position, with a pair of adjacent states, with a confident position."""
    def responses(flags: Tensor, response: Tensor) -> Tensor:
        return (torch.zeros(b.n_responses, dtype=torch.long).index_add(0, response, flags.long()) > 0).sum()

    sel = b.noisy
    return torch.stack([responses((b.unresolved & (b.targets != IGNORE))[sel], b.response[sel]),
                        responses(torch.ones_like(b.pair_response), b.pair_response),
                        responses(b.confident[sel], b.response[sel])])


def orl_loss(model: Transformer, b: ReplayBatch, residual: str, ids: SpecialIds, w: LossWeights,
             ref_model: Transformer | None = None, norm: Tensor | None = None,
             chunk: int = HEAD_CHUNK) -> tuple[Tensor, dict[str, Tensor]]:
    """ref_model: the weights that produced the rollouts, when they differ from `model` (stale
    rollouts). With fresh rollouts (None) the rollout distribution is the current one: L_KL is 0.
    norm: response_counts summed over every process's batch (torchrun), so that each process's loss
    is its share of the mean over all responses; default: this batch's own counts.

    Every loss term reads only unresolved positions (L_KL's confident ones are a subset), so the head
    runs there alone, `chunk` positions at a time (orl.train.chunked_head): no [N, V] tensor is kept."""
    core = getattr(model, "module", model)
    sel = b.unresolved
    hs = replay_hidden(model, b, residual, ids, at=sel)  # [N, D]
    dev = hs.device
    n_pred, n_aec, n_kl = (None, None, None) if norm is None else norm.to(dev)
    resp, targets = b.response[sel].to(dev), b.targets[sel].to(dev)  # the batch is built on the host
    ref_hs = None
    if ref_model is not None:
        with torch.no_grad():
            ref_hs = replay_hidden(ref_model, b, residual, ids, at=sel)
        ref_w = ref_model.lm_head.weight

    def read(h: Tensor, weight: Tensor) -> Tensor:
        return ban_tokens(core.softcap((h.to(weight.dtype) @ weight.T).float()), ids.banned)

    def stats(logits: Tensor, rows: slice) -> Tensor:
        # column 2: the position already decodes to its verified token (L_CF's gate; no gradient)
        right = (logits.detach().argmax(-1) == targets[rows]).to(logits.dtype)
        cols = [F.cross_entropy(logits, targets[rows], reduction="none", ignore_index=IGNORE), normalized_entropy(logits),
                right]
        if ref_hs is not None:
            with torch.no_grad():
                ref = read(ref_hs[rows], ref_w)
            cols.append(capped_reverse_kl(logits, ref, w.kl_cap))
        return torch.stack(cols, -1)

    st = chunked_head(hs, core.lm_head.weight, read, stats, chunk)  # [N, 3 or 4]: CE, entropy, right, KL
    ones = torch.ones_like(resp, dtype=torch.bool)
    # L_pred reads verified tokens only (not the positions past a rollout's stop string: IGNORE); the states'
    # entropies (L_AEC) and L_KL keep those positions, which the engine decoded as they are replayed
    l_pred = per_response_mean(st[:, 0], targets != IGNORE, resp, b.n_responses, n_pred)
    h = st[:, 1]
    h_state = state_entropy(h, ones, b.state_id[sel].to(dev), b.n_states)
    l_aec = aec_loss(h_state, b.pair_src.to(dev), b.pair_next.to(dev), b.pair_response.to(dev), b.n_responses, w.rho,
                     n_aec)
    # fresh rollouts: KL(p || stopgrad p) is 0 with a zero gradient, so it is not computed
    l_kl = (per_response_mean(st[:, 3], b.confident[sel].to(dev), resp, b.n_responses, n_kl) if ref_hs is not None
            else h.new_zeros(()))
    l_cf = certainty_forcing(h, st[:, 2] > 0, targets != IGNORE, resp, b.n_responses, n_pred)
    total = l_pred + w.lambda_aec * l_aec + w.lambda_kl * l_kl + w.lambda_cf * l_cf
    return total, {"pred": l_pred.detach(), "aec": l_aec.detach(), "kl": l_kl.detach(), "cf": l_cf.detach(),
                   "entropy": h_state.detach().mean() if b.n_states else h.sum().detach() * 0}
