"""Training rows in the fused self-draft's geometry (orl.engine.self_draft.fused_verify).

Why: with `spec_draft = "fused"` a checkpoint trained with `ar_aux` emits exactly its AR path's tokens, and its
speed is how many of its diffusion path's drafts the AR path accepts. Those drafts are read in one geometry:
after the clean sequence x[0:c] (whatever the AR path has accepted), a group of m masks at positions c..c+m-1
sees x[0:c] and itself, bidirectionally, and its position c + j predicts x[c + 1 + j] (shifted read-out: the
first mask stands where the AR path's bonus token will be, which the draft cannot know). Staircase block rows
train the diffusion path at block-aligned cuts, with the block's other tokens partly visible; these rows train it
exactly where and how the fused decoder reads it, at every cut of an answer, from sequences the model's own AR
path produced (on-policy draft training; the recipe that rolls them out and keeps verified ones builds on this).

A row packs one sequence: its L clean tokens (causal: the AR path; `answer_weights` marks the positions of
the answer's next-token term) and then one group of m masks per anchor c (every answer cut from `start`, the
first answer position, to L - 2). One forward trains every anchor; its logits at a group are
those of an uncached forward over [x[0:c], m masks] (tests/test_draft_rows.py), which are fused_verify's
(tests/test_fused_self_draft.py).
"""
from __future__ import annotations

import torch

from orl.train.batches import Batch


def anchors(start: int, length: int, stride: int = 1) -> list[int]:
    """The cuts c a row trains (the group sees x[0:c]): from the first answer position to the last that still
    has a token to predict after the bonus slot (c + 1 < length)."""
    if start < 1 or start > length:
        raise ValueError(f"the answer must start inside the sequence after a prompt token: start {start}, "
                         f"length {length}")
    return list(range(start, length - 1, stride))


def draft_rows(seqs: list[list[int]], starts: list[int], m: int, mask_id: int, pad_id: int,
               stride: int = 1, clean_width: int | None = None) -> Batch:
    """Rows (module docstring) for sequences seqs (prompt + answer, as the AR path produced them) whose answers
    start at starts; m masks a group (the decoder's spec_tokens); a group every `stride` cuts. Targets are
    aligned to the position that reads them (no read_from); `weight` is the draft term's (1 at every group
    position with a token to predict), `answer_weights` the next-token term's. clean_width: every row's groups
    start at this column (padding after a shorter sequence), so that one cut separates the clean columns from
    the draft ones in every row (a separate verifier on the clean rows: orl.model.row_split); None: each row's
    groups follow its own sequence."""
    if m < 1:
        raise ValueError(f"a draft group holds at least one mask, got m = {m}")
    if len(seqs) != len(starts) or not seqs:
        raise ValueError(f"{len(seqs)} sequences and {len(starts)} answer starts: one start per sequence, at least one")
    cuts = [anchors(s, len(x), stride) for x, s in zip(seqs, starts)]
    if clean_width is not None and clean_width < max(map(len, seqs)):
        raise ValueError(f"clean_width {clean_width} is shorter than the longest sequence ({max(map(len, seqs))})")
    n = (clean_width + max(len(c) for c in cuts) * m if clean_width is not None
         else max(len(x) + len(c) * m for x, c in zip(seqs, cuts)))
    B = len(seqs)
    tokens = torch.full((B, n), pad_id, dtype=torch.long)
    pos = torch.zeros((B, n), dtype=torch.long)
    targets = torch.zeros((B, n), dtype=torch.long)
    weight = torch.zeros((B, n))
    mask = torch.eye(n, dtype=torch.bool).repeat(B, 1, 1)  # padding sees itself only (no empty softmax rows)
    for b, (x, s, cs) in enumerate(zip(seqs, starts, cuts)):
        L = len(x)
        tokens[b, :L] = torch.tensor(x)
        pos[b, :L] = torch.arange(L)
        mask[b, :L, :L] = torch.ones(L, L, dtype=torch.bool).tril()                        # clean: causal
        targets[b, :L - 1] = torch.tensor(x[1:])
        for g, c in enumerate(cs):
            q = (L if clean_width is None else clean_width) + g * m                        # the group's first row
            tokens[b, q:q + m] = mask_id
            pos[b, q:q + m] = torch.arange(c, c + m)
            mask[b, q:q + m, :c] = True                                                      # x[0:c]
            mask[b, q:q + m, q:q + m] = True                                                 # its own group
            for j in range(m):
                if c + 1 + j < L:
                    targets[b, q + j] = x[c + 1 + j]
                    weight[b, q + j] = 1.0
    return Batch(tokens=tokens, pos=pos, mask=mask, targets=targets, weight=weight)


def answer_weights(rows: Batch, seqs: list[list[int]], starts: list[int]) -> torch.Tensor:
    """[B, N] weight 1 at the clean positions that read an answer token (position i reads x[i + 1], so the
    answer's tokens x[s:]): the AR path's next-token term, apart from the draft term so that each is normalised
    by its own count."""
    w = torch.zeros_like(rows.weight)
    for b, (x, s) in enumerate(zip(seqs, starts)):
        w[b, s - 1:len(x) - 1] = 1.0
    return w


def corpus_draft_batch(rows: torch.Tensor, start: int, m: int, stride: int, mask_id: int, pad_id: int,
                       draft_weight: float, ar_weight: float = 0.0) -> Batch:
    """Draft rows (draft_rows) for text windows rows [B, T] whose answer part starts at `start` (teacher forced:
    the drafts learn the text's next tokens at every `stride`-th cut), the groups at draft_weight; with
    ar_weight > 0 the clean positions also carry the next-token term at that weight - the same loss as
    batches.next_token_batch on these rows (the clean part is causal and sees no group), from the same forward."""
    seqs = rows.tolist()
    b = draft_rows(seqs, [start] * len(seqs), m, mask_id, pad_id, stride)
    w = b.weight * draft_weight
    if ar_weight > 0:
        w[:, :rows.shape[1] - 1] = ar_weight
    return Batch(tokens=b.tokens, pos=b.pos, mask=b.mask, targets=b.targets, weight=w)


def greedy_tokens(model, h: torch.Tensor, chunk: int) -> torch.Tensor:
    """[B, N] argmax of the head over hidden states h [B, N, D], a chunk of positions at a time (no [B, N, V]
    logits), on the host: the tokens a greedy read-out emits there."""
    from orl.train.chunked_ce import chunked_predict

    core = getattr(model, "module", model)
    flat = h.flatten(0, 1)
    _, top = chunked_predict(flat, core.lm_head.weight, torch.zeros(len(flat), dtype=torch.long, device=flat.device),
                             chunk, core.args.final_logit_softcap)
    return top.view(h.shape[0], h.shape[1]).cpu()


@torch.no_grad()
def with_ar_targets(model, b: Batch, length: int, chunk: int) -> Batch:
    """b (corpus_draft_batch rows of `length` clean tokens) with every draft position's target replaced by the
    model's own AR path's greedy token at the same position: a group position at pos p predicts x[p + 1], which
    is what the clean position p reads out, so the drafts learn what the verifier will accept (self-distillation
    of the AR path into the drafts, on the text's prefixes). One no-grad forward of the clean columns only
    (they are causal and see no group)."""
    dev = getattr(model, "module", model).lm_head.weight.device
    h = model(b.tokens[:, :length].to(dev), b.pos[:, :length].to(dev), b.mask[:, :length, :length].to(dev),
              return_hidden=True)                                                           # [B, L, D]
    top = greedy_tokens(model, h, chunk)                                                   # [B, L]
    targets = b.targets.clone()
    at = b.pos[:, length:].clamp(max=length - 1)                                           # [B, N - L]
    targets[:, length:] = torch.where(b.weight[:, length:] > 0, top.gather(1, at), targets[:, length:])
    return Batch(tokens=b.tokens, pos=b.pos, mask=b.mask, targets=targets, weight=b.weight)


def loss_sums(model, rows: Batch, ar_w: torch.Tensor, chunk: int, ref=None,
              kl_cap: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(draft CE sum over rows.weight, next-token CE sum over ar_w, KL sum over ar_w) from one forward; the head
    runs only on the positions with a weight (orl.train.chunked_ce, orl.train.chunked_head).

    The KL term is min(KL(p_theta || p_ref), kl_cap) of the AR path at the answer's positions against a frozen
    `ref` (the run's base): the next-token CE on the model's own greedy tokens only sharpens what the path
    already says, while the KL holds its whole distribution where the fused decoder reads it. 0 without ref."""
    from orl.train.chunked_ce import chunked_ce_sum
    from orl.train.chunked_head import capped_kl_sum

    from orl.model.row_split import head_weight

    core = getattr(model, "module", model)
    h = model(rows.tokens, rows.pos, rows.mask, return_hidden=True)                        # [B, N, D]
    sums = []
    for w, draft in ((rows.weight, True), (ar_w, False)):  # each row read by the head it runs at decode time
        b, t = (w > 0).nonzero(as_tuple=True)
        sums.append(chunked_ce_sum(h[b, t], head_weight(core, draft), rows.targets[b, t], w[b, t], chunk,
                                   core.args.final_logit_softcap) if len(b) else h.sum() * 0.0)
    b, t = (ar_w > 0).nonzero(as_tuple=True)
    if ref is None or not len(b):
        return sums[0], sums[1], h.sum() * 0.0
    # the clean tokens come first in every row and see only clean tokens (causal), so the first
    # max-clean-length columns give the reference their exact hidden states without the draft groups
    n = int(t.max()) + 1
    with torch.no_grad():
        ref_h = ref(rows.tokens[:, :n], rows.pos[:, :n], rows.mask[:, :n, :n], return_hidden=True)[b, t]  # [P, D]
    return sums[0], sums[1], capped_kl_sum(core, h[b, t], ref_h, getattr(ref, "module", ref).lm_head.weight, ar_w[b, t],
                                           kl_cap, chunk)
