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

`spec_draft = "fused"` drops the draft forward (fused_verify): the verify forward over [last, d_1..d_k] also
carries, for every acceptance length a = 0..k, a group of m masks at the slots after d_a, so whatever the
verify accepts, the next round's draft is already there. A round is then ONE forward of (k + 1) + (2k + 1) m
positions (m = k, cut to what the answer can still use); a batch-1 forward on a GPU is latency bound, so its
cost grows far less than its length (on a CPU core it does not), and the output is still exactly the AR
path's. Group a cannot see the bonus token the verify will pick after d_a (it is not known before the
forward), so that slot is a mask too, and the draft is read from the position after it: one token further
ahead than the two-forward drafter, which sees the last token. k more groups put the
previous draft's second choice at that slot instead (a rejected draft token's bonus token is often it):
when the verify's bonus token is that guess, the next draft is that group's.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from orl.engine.ar_step import ARState, next_tokens
from orl.engine.config import UnsupportedSetting
from orl.model.row_split import draft_rows_from


def scratch_slots(k: int, max_new_tokens: int, groups: int = 0) -> int:
    """Cache slots a fused round needs past the request's own: at most 2k + 1 groups (or `groups`, when fewer:
    ARConfig.spec_groups) of at most k positions, k cut to what the answer can still use. Every fused forward
    attends over the whole cache, so the scratch is no larger than the groups a round carries."""
    k = max(0, min(k, max_new_tokens - 1))
    return min(groups or 2 * k + 1, 2 * k + 1) * k


def check_self_draft(model, mask_id: int | None, objective: str | None, draft: str = "diffusion") -> None:
    """A checkpoint drafts for itself only as a block-diffusion model with a mask token and the shifted
    read-out (objective: the manifest's; None for a bare model; draft: the spec_draft value, for the error)."""
    if objective == "autoregressive":
        raise UnsupportedSetting(f"spec_draft {draft!r} needs a block-diffusion checkpoint: an autoregressive one "
                                 "has no diffusion path to draft with (use spec_draft 'lookup')", field="spec_draft")
    if mask_id is None:
        raise UnsupportedSetting(f"spec_draft {draft!r} needs a checkpoint with a mask token (a block-diffusion "
                                 "checkpoint); this tokenizer has none: use spec_draft 'lookup'", field="spec_draft")
    if not model.args.shift_logits:
        raise UnsupportedSetting(f"spec_draft {draft!r} needs the shifted read-out (model_args.shift_logits): an "
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
    with draft_rows_from(model, 1):  # the clean last token is a verify row (orl.model.row_split)
        logits = model(tokens, slots[None] - st.pad[:, None], mask, cache=st.cache, slots=slots)[0]  # [T, V]
    scores = logits[:k].masked_fill(st.banned, float("-inf"))                                   # [k, V]
    scores[:, mask_id] = float("-inf")  # a draft never proposes a mask
    # a host sync per draft, like the verify's: the draft's tokens are the next verify's inputs
    return scores.argmax(-1).tolist()


class FusedRound(NamedTuple):
    targets: list[int]             # the AR path's token after each input token
    drafts: list[list[int]]        # per group: its greedy m-token draft
    seconds: list[list[int]]       # per group: the second choice at each draft position (the next guesses)
    probs: list[list[float]]       # per group, when asked: [p(draft), p(second)] at each position; else []


def all_groups(T: int, n_guesses: int) -> list[tuple[int, bool]]:
    """Every group a fused round can carry: a mask group per acceptance length a = 0..T-1, then a guess group
    per a < n_guesses (groups are (a, with the guess))."""
    return [(a, False) for a in range(T)] + [(a, True) for a in range(n_guesses)]


def likely_groups(probs: list[list[float]], n: int) -> list[tuple[int, bool]]:
    """The n groups likeliest to serve the next round, judged by the draft's own confidences probs[i] =
    [p(d_{i+1}), p(second choice at i+1)] (the diffusion path's, a proxy for the AR path's acceptance). With
    reach_a = p(d_1)...p(d_a), the chance that exactly a draft tokens are accepted and d_{a+1} is rejected is
    reach_a (1 - p(d_{a+1})): mask group a serves every such round (its draft reads past the bonus slot, whatever
    the bonus token), so that is its score; mask group k (all accepted) scores reach_k. Guess group a serves
    the share of them whose bonus token is its guess, with a better draft (the two-forward drafter's): it scores
    reach_a p(second), never above its own mask group, so it is carried only beside it. Ties go to the shorter
    acceptance, mask first."""
    scored, reach = [], 1.0
    for a, (p, q) in enumerate(probs):
        scored += [(reach * (1.0 - p), a, False), (reach * q, a, True)]
        reach *= p
    scored.append((reach, len(probs), False))
    return [(a, g) for _, a, g in sorted(scored, key=lambda t: (-t[0], t[1], t[2]))[:n]]


@torch.no_grad()
def fused_verify(model, st: ARState, slot: int, tokens: list[int], guesses: list[int], m: int, mask_id: int,
                 temperature: float, index: int, groups: list[tuple[int, bool]] | None = None,
                 probs: bool = False) -> FusedRound:
    """One forward: the verify of tokens (last accepted token, then the draft d_1..d_{T-1}) at slots slot..
    as in orl.engine.speculative.verify, plus draft groups of m positions each, by default all of them
    (all_groups; `groups` picks some, e.g. likely_groups):
      group (a, False): m masks at slots slot + a + 1 .., seeing the sequence up to d_a;
      group (a, True): the same with guesses[a], a clean guess of the bonus token should the verify reject
        d_{a+1}, in place of the first mask (the guess sees only what precedes it).
    Position j of a group predicts slot + a + 2 + j (shifted read-out): the m-token draft that follows the
    bonus token. The groups' K/V go to the scratch slots at the end of the cache (sized by scratch_slots),
    never to a slot the sequence owns. probs: also each draft position's top-2 probabilities."""
    dev = st.cache.length.device
    T, S = len(tokens), st.cache.max_len
    groups = all_groups(T, len(guesses)) if groups is None else groups
    G = len(groups)
    R = S - G * m  # the groups' K/V go to the last G m slots; R: the slots before them, the sequence's
    a = torch.arange(T, device=dev)
    j = torch.arange(m, device=dev).repeat(G)                                                 # [G m] index in group
    anchor = torch.tensor([g for g, _ in groups], dtype=torch.long, device=dev)                # [G] sees up to d_a
    pos = torch.cat([slot + a, (slot + 1 + anchor).repeat_interleave(m) + j])                 # [N], N = T + G m
    slots = torch.cat([slot + a, torch.arange(R, S, device=dev)])
    seen_to = torch.cat([slot + a, (slot + anchor).repeat_interleave(m)])                     # [N]
    keys = torch.arange(R, device=dev)
    seq = (keys <= seen_to[:, None]) & (keys >= st.pad[:, None])                              # [N, R]
    g_id = torch.arange(G, device=dev).repeat_interleave(m)                                   # [G m]
    group = torch.cat([torch.full((T,), -1, device=dev), g_id])                               # [N] -1: verify
    is_guess = torch.tensor([g for _, g in groups], dtype=torch.bool, device=dev)             # [G]
    guess = torch.cat([torch.zeros(T, dtype=torch.bool, device=dev), is_guess[g_id] & (j == 0)])  # [N]
    # verify rows: causal, no group. Group rows: the sequence up to d_a and their own group, bidirectionally,
    # except a clean guess, which sees only itself there (a clean position never attends to noisy ones)
    own = (group[:, None] == g_id) & (~guess[:, None] | (j == 0))                            # [N, G m]
    mask = torch.cat([seq, own], 1)                                                           # [N, S]
    x = torch.tensor([tokens + [t for g, with_guess in groups for t in
                                ([guesses[g]] if with_guess else [mask_id]) + [mask_id] * (m - 1)]], device=dev)
    with draft_rows_from(model, T):  # with a separate verifier (orl.model.row_split) the groups are the drafter's
        logits = model(x, pos[None] - st.pad[:, None], mask[None], cache=st.cache, slots=slots)[0]  # [N, V]
    targets = next_tokens(logits[:T], st.banned, temperature, st.seed.expand(T), index + a)
    scores = logits[T:].masked_fill(st.banned, float("-inf"))                                 # [G m, V]
    scores[:, mask_id] = float("-inf")
    top = scores.topk(2, -1)
    parts = [targets, top.indices.flatten()]
    if probs:  # in millionths, so that the same transfer carries them
        parts.append((top.values - scores.logsumexp(-1, keepdim=True)).exp().mul(1e6).round().long().flatten())
    # the one host sync per round: the acceptance decides the next round's start and draft
    host = torch.cat(parts).tolist()
    flat, conf = host[T:T + 2 * G * m], host[T + 2 * G * m:]
    return FusedRound(host[:T], [flat[2 * m * g: 2 * m * (g + 1): 2] for g in range(G)],
                      [flat[2 * m * g + 1: 2 * m * (g + 1): 2] for g in range(G)],
                      [[[p / 1e6 for p in conf[2 * (m * g + i): 2 * (m * g + i) + 2]] for i in range(m)]
                       for g in range(G)] if probs else [])
