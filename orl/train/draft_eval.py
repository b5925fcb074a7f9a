"""How well a checkpoint's drafts would be accepted, measured on text in one forward (a training-time curve).

The fused self-speculative decoder (orl.engine.self_draft) emits its AR path's greedy tokens; a round's drafts
are m masks after the accepted prefix x[0:c], and draft j is accepted when drafts 0..j-1 were and it equals
the AR path's greedy token at position c + j. On held-out text (the window's own tokens as the prefix, teacher
forced, so an estimate of free-running acceptance, not a measurement of it) one forward over draft rows
(orl.train.draft_rows) gives, at every cut, each draft and the AR path's greedy token at the same position:
`agree_j` is how often draft j matches it, `accepted` the mean length of the matching run from draft 0, and
1 + accepted is the tokens per forward such rounds would give. benchmarks/convert_eval.py `--spec` measures the
decoder itself.
"""
from __future__ import annotations

import torch

from orl.train.draft_rows import corpus_draft_batch, greedy_tokens


@torch.no_grad()
def draft_agreement(model, rows: torch.Tensor, start: int, m: int, stride: int, mask_id: int, pad_id: int,
                    chunk: int = 128) -> dict:
    """rows [B, L] of text, the answer part from `start`; drafts of m at every stride-th cut -> agree_j (j < m),
    accepted (mean leading run of agreeing drafts per cut) and tpf_estimate = 1 + accepted. Cuts whose draft
    j would predict past the window count only their first L - 1 - c drafts."""
    dev = getattr(model, "module", model).lm_head.weight.device
    b = corpus_draft_batch(rows, start, m, stride, mask_id, pad_id, draft_weight=1.0)
    B, L = rows.shape
    h = model(b.tokens.to(dev), b.pos.to(dev), b.mask.to(dev), return_hidden=True)        # [B, N, D]
    top = greedy_tokens(model, h, chunk)                                                    # [B, N]
    greedy = top[:, :L]                                                                     # the AR path's tokens
    drafts = top[:, L:].view(B, -1, m)                                                      # [B, cuts, m]
    live = (b.weight[:, L:] > 0).view(B, -1, m)                                             # inside the window
    at = b.pos[:, L:].clamp(max=L - 1).view(B, -1, m)
    ok = (drafts == greedy.gather(1, at.flatten(1)).view_as(drafts)) & live                 # [B, cuts, m]
    run = ok.int().cumprod(-1).sum(-1).float()                                              # leading run per cut
    agree = [round(float(ok[..., j].sum() / live[..., j].sum().clamp(min=1)), 4) for j in range(m)]
    accepted = float(run.mean())
    return {"agree": agree, "accepted": round(accepted, 4), "tpf_estimate": round(1 + accepted, 4),
            "cuts": int(run.numel()), "counts": {"hits": ok.sum((0, 1)).tolist(), "live": live.sum((0, 1)).tolist(),
                                                 "run_sum": int(run.sum())}}
