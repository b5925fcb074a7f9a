"""The block-diffusion checkpoint as its own drafter for speculative decoding (`ARConfig.spec_draft =
"diffusion"`): self-speculative decoding, as in SSD (Gao et al. 2025) and Spiffy, without a second model.

Why: a block-diffusion checkpoint trained with a next-token loss beside its diffusion loss (`ar_aux`) carries
two decoders in one set of weights. Its causal (AR) path can hold skills its diffusion path lost (issue 21:
hint4g2 decodes long7xp beyond its training range at 49% in blocks of one and 11% at threshold 0.9), while
the diffusion path drafts many tokens in one forward. Drafting with the diffusion path and verifying with
the AR path (orl.engine.speculative) emits exactly the AR path's tokens at more than one token per forward.

One draft forward: [last accepted token, k masks] at the next k + 1 cache slots. The masks attend to the
cache, the last token and each other (bidirectionally, as inside a block canvas); the last token, clean,
attends causally, as a clean position does in training. With the shifted read-out (the checkpoint predicts
token i from position i - 1) the logits of window positions 0..k-1 are the k drafted tokens (greedy). The
window's K/V are written to the cache and overwritten by the verify forward over the same slots before any
query reads them. Draft forwards count as forwards (TPF = tokens / all forwards).
"""
from __future__ import annotations

import torch

from orl.engine.ar_step import ARState
from orl.engine.config import UnsupportedSetting


def check_self_draft(model, mask_id: int | None, objective: str | None) -> None:
    """A checkpoint drafts for itself only as a block-diffusion model with a mask token and the shifted
    read-out (objective: the manifest's; None for a bare model)."""
    if objective == "autoregressive":
        raise UnsupportedSetting("spec_draft 'diffusion' needs a block-diffusion checkpoint: an autoregressive one "
                                 "has no diffusion path to draft with (use spec_draft 'lookup')", field="spec_draft")
    if mask_id is None:
        raise UnsupportedSetting("spec_draft 'diffusion' needs a checkpoint with a mask token (a block-diffusion "
                                 "checkpoint); this tokenizer has none: use spec_draft 'lookup'", field="spec_draft")
    if not model.args.shift_logits:
        raise UnsupportedSetting("spec_draft 'diffusion' needs the shifted read-out (model_args.shift_logits): an "
                                 "unshifted block-diffusion checkpoint reads each token off its own position, so "
                                 "it has no causal next-token path to verify with",
                                 field="spec_draft")


@torch.no_grad()
def diffusion_draft(model, st: ARState, slot: int, last: int, k: int, mask_id: int) -> list[int]:
    """k tokens drafted in one forward after `last` (at `slot`), read greedily off the diffusion path."""
    if k <= 0:
        return []
    dev = st.cache.length.device
    slots = torch.arange(slot, slot + k + 1, device=dev)                                    # [T], T = k + 1
    keys = torch.arange(st.cache.max_len, device=dev)
    mask = ((keys <= slot + k) & (keys >= st.pad[:, None]))[:, None, :].repeat(1, k + 1, 1)  # [1, T, S]
    # the clean last token must not see the masks after it: in training a clean position never attends to
    # noisy ones (and a block's first token is read off the clean commit forward in the engine)
    mask[:, 0] &= keys <= slot
    tokens = torch.tensor([[last] + [mask_id] * k], device=dev)
    logits = model(tokens, slots[None] - st.pad[:, None], mask, cache=st.cache, slots=slots)[0]  # [T, V]
    scores = logits[:k].masked_fill(st.banned, float("-inf"))                                   # [k, V]
    scores[:, mask_id] = float("-inf")  # a draft never proposes a mask
    # a host sync per draft, like the verify's: the draft's tokens are the next verify's inputs
    return scores.argmax(-1).tolist()
