"""The AR-path anchor of ORL (`LossWeights.lambda_ar`): a next-token loss on the kept rollouts.

Why: a base trained with `ar_aux` (stage 2's next-token loss) has one set of weights with two paths,
block diffusion and causal next-token; the fused self-speculative decoder emits exactly the AR path's
tokens. ORL's losses read only the diffusion path and, with fresh rollouts, its KL anchor is zero, so
nothing holds the AR path: on the length-varied tiny bases ORL cost the fused decoder accuracy
(docs/RESULTS.md). This term keeps stage 2's next-token loss on the verified rollouts (rejection-sampled
self-training of the AR path: the targets are the model's own outputs that passed the verifier).
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.model.model import Transformer
from orl.train.batches import Batch, ar_batch
from orl.train.chunked_ce import chunked_ce_sum
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
    # ar_batch targets EOS after each answer: the target at index (P - 1) + len(answer), P the padded prompt
    P = b.tokens.shape[1] + 1 - (max(len(a) for _, a in pairs) + 1)
    for i, ((_, a), e) in enumerate(zip(pairs, ended)):
        if not e:
            b.weight[i, P - 1 + len(a)] = 0.0
    return b


def ar_anchor_sum(model: torch.nn.Module, b: Batch, chunk: int = 256) -> Tensor:
    """sum over b's weighted positions of the next-token cross-entropy through the causal path (no
    residual: AR rows never hold a mask), the head run chunk by chunk (a large vocabulary keeps no
    [N, V] logits). `model` may be the DDP wrapper."""
    core: Transformer = getattr(model, "module", model)
    dev = next(core.parameters()).device
    h = model(b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev), return_hidden=True)  # [B, T, D]
    r, t = (b.weight > 0).nonzero(as_tuple=True)  # host-built batch: no device sync
    return chunked_ce_sum(h[r.to(dev), t.to(dev)], core.lm_head.weight, b.targets[r, t].to(dev),
                          b.weight[r, t].to(dev), chunk, core.args.final_logit_softcap)
