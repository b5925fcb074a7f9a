"""The AR-path anchors of ORL: `LossWeights.lambda_ar`, a next-token loss on the kept rollouts, and
`lambda_ar_kl`, a capped reverse KL of the AR path to the frozen base on every rollout.

Why: a base trained with `ar_aux` (stage 2's next-token loss) has one set of weights with two paths,
block diffusion and causal next-token; the fused self-speculative decoder emits exactly the AR path's
tokens. ORL's losses read only the diffusion path and, with fresh rollouts, its KL anchor is zero, so
nothing holds the AR path: on the length-varied tiny bases ORL cost the fused decoder accuracy
(docs/RESULTS.md). lambda_ar keeps stage 2's next-token loss on the verified rollouts (rejection-sampled
self-training of the AR path); lambda_ar_kl holds the path's distribution to the base's, also where the
rollouts were wrong (the draft recipe's anchor, orl.train.draft_rows.loss_sums).
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.model.model import Transformer
from orl.train.batches import Batch, ar_batch
from orl.train.chunked_ce import chunked_ce_sum
from orl.train.chunked_head import capped_kl_sum
from orl.train.rollout import Rollout


def rollout_ar_batch(rollouts: list[Rollout], pad_id: int, eos_id: int) -> Batch:
    """Causal rows prompt + generated tokens; the loss on the generated tokens, and on EOS only where the
    rollout emitted it (a row cut at max_new_tokens or by a stop string has no EOS to learn)."""
    if not rollouts:
        raise ValueError("rollout_ar_batch needs at least one rollout")
    pairs, ended = [], []
    for r in rollouts:
        toks = list(r.gen.token_ids)
        ended.append(bool(toks) and toks[-1] == eos_id)
        pairs.append((list(r.gen.prompt_ids), toks[:-1] if ended[-1] else toks))
    b = ar_batch(pairs, pad_id, eos_id)
    # ar_batch targets EOS after each answer, at (P - 1) + len(answer), P the padded prompt: T - 1 = P + max_len - 1
    P = b.tokens.shape[1] - max(len(a) for _, a in pairs)
    for i, ((_, a), e) in enumerate(zip(pairs, ended)):
        if not e:
            b.weight[i, P - 1 + len(a)] = 0.0
    return b


def ar_anchor_sums(model: torch.nn.Module, b: Batch, w_nll: Tensor, w_kl: Tensor, ref: Transformer | None = None,
                   kl_cap: float = 1.0, chunk: int = 256) -> tuple[Tensor, Tensor]:
    """One causal forward over b's rows (no residual: AR rows never hold a mask) -> (sum of w_nll x next-token
    cross-entropy, sum of w_kl x min(KL(p_theta || p_ref), kl_cap)), w_nll, w_kl [B, T]. The head runs chunk by
    chunk at the weighted positions only (a large vocabulary keeps no [N, V] logits). The KL holds the AR path's
    whole distribution where the fused decoder reads it, on every rollout (the next-token loss on the kept ones
    is near 0 on a strong base: it only sharpens what the path already says). `model` may be the DDP wrapper;
    ref: the frozen base (needed when w_kl has a weight)."""
    core: Transformer = getattr(model, "module", model)
    dev = next(core.parameters()).device
    toks, pos, mask = b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev)
    h = model(toks, pos, mask, return_hidden=True)  # [B, T, D]
    zero = h.sum() * 0.0  # keeps every rank's graph alike when a term has no weighted position
    r, t = (w_nll > 0).nonzero(as_tuple=True)  # host-built weights: no device sync
    nll = (chunked_ce_sum(h[r.to(dev), t.to(dev)], core.lm_head.weight, b.targets[r, t].to(dev), w_nll[r, t].to(dev),
                          chunk, core.args.final_logit_softcap) if len(r) else zero)
    r, t = (w_kl > 0).nonzero(as_tuple=True)
    if not len(r):
        return nll, zero
    if ref is None:
        raise ValueError("ar_anchor_sums: a KL weight needs the reference model")
    r, t = r.to(dev), t.to(dev)
    with torch.no_grad():
        ref_h = ref(toks, pos, mask, return_hidden=True)[r, t]  # [P, D]
    return nll, capped_kl_sum(core, h[r, t], ref_h, ref.lm_head.weight, w_kl.to(dev)[r, t], kl_cap, chunk)
