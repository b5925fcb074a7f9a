"""Prompt-lookup speculative decoding (Saxena 2023) for the AR decoder: the AR peer at its fastest exact
setting, with no draft model. `ARConfig.spec_tokens = k > 0` turns it on (ARDecoder.run).

Each verify step:
- draft: the longest n-gram (n <= spec_ngram) ending the sequence so far (prompt + generated) is looked up
  at its first earlier occurrence; the up to k tokens that followed it there are the draft (none: a plain
  one-token step). The same rule as transformers' PromptLookupCandidateGenerator (earliest match, longest
  n-gram first), so `generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=n)` verifies the same
  drafts and runs the same number of target forwards.
- verify: ONE target forward over [last token, draft] at the next cache slots, causal among them, scores
  draft + 1 positions; position j's token is chosen exactly as plain decoding would choose output
  len(out) + j (greedy, or Gumbel-max with the same counter-based noise: ar.next_tokens).
- accept: the longest prefix of the draft equal to those choices, plus the target's own next token
  (so every verify yields at least one token). Tokens after an EOS are dropped; a draft is cut so that a
  verify never passes max_new_tokens (and never writes past the request's cache).
- roll back: the next verify writes from the slot after the last accepted token. The rejected draft
  positions' K/V stay in the static cache but are never read: attention sees keys at slots <= the query's
  slot, and the next forward overwrites those slots before any query reaches them.

Every accepted token is the one plain decoding emits at that index given the same prefix, so the output
is token-identical to `spec_tokens = 0` (greedy and sampled), up to float differences between scoring a
position alone and inside a longer forward (none seen in tests/test_ar_speculative.py). Forwards:
`step_forwards` counts every target forward (verify), prefill over prompt[:-1] apart as for every
decoder: TPF = generated tokens / target forwards (DESIGN section 5). No draft model, so no draft forwards.

`ARConfig.spec_draft = "diffusion"` swaps the drafter: a block-diffusion checkpoint drafts k tokens with its
own diffusion path in one forward (orl.engine.self_draft) and the verify above keeps exactly its AR path's
tokens; the draft forwards count in `step_forwards`. `spec_draft = "fused"` folds each round's draft into
the previous round's verify forward (orl.engine.self_draft.fused_verify): one forward per round.

Batch 1 only (UnsupportedSetting otherwise): rows would accept different lengths, so their caches would
advance unevenly. Eager only: the verify length changes with the draft.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import torch

from orl.engine.ar_step import ARConfig, ARState, next_tokens
from orl.engine.config import UnsupportedSetting
from orl.engine.events import BlockEvent, DoneEvent, Event
from orl.engine.request import Clock
from orl.engine.self_draft import all_groups, diffusion_draft, fused_verify, likely_groups, scratch_slots
from orl.engine.sequence import Generation
from orl.engine.stops import Stops


class PromptLookup:
    """The drafter: the sequence so far and, per n-gram (n <= max_ngram), the start of its first
    occurrence that has a token after it. Appending a token makes the n-grams ending just before it
    eligible, so a draft is a dict lookup per n, not a scan of the sequence."""

    def __init__(self, tokens: list[int], max_ngram: int):
        self.seq: list[int] = []
        self.max_ngram = max_ngram
        self.first: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        for t in tokens:
            self.seq.append(t)
            end = len(self.seq) - 1  # the new token follows the n-grams ending at end - 1
            for n in range(1, min(self.max_ngram, end) + 1):
                self.first.setdefault(tuple(self.seq[end - n:end]), end - n)  # setdefault: the first stays

    def draft(self, k: int) -> list[int]:
        """Up to k tokens that followed the first earlier occurrence of the longest matching suffix."""
        L = len(self.seq)
        if k <= 0:
            return []
        for n in range(min(self.max_ngram, L - 1), 0, -1):
            i = self.first.get(tuple(self.seq[L - n:]))
            if i is not None:
                return self.seq[i + n: i + n + k]
        return []


def accepted(draft: list[int], targets: list[int]) -> int:
    """How many leading draft tokens equal the target's choices at their positions."""
    n = 0
    while n < len(draft) and draft[n] == targets[n]:
        n += 1
    return n


@torch.no_grad()
def verify(model, st: ARState, slot: int, tokens: list[int], temperature: float, index: int) -> list[int]:
    """One target forward over tokens (the last accepted token, then the draft) at slots slot, slot + 1,
    ...; -> the token chosen after each of them (output indices index, index + 1, ...)."""
    dev = st.cache.length.device
    T = len(tokens)
    slots = torch.arange(slot, slot + T, device=dev)
    keys = torch.arange(st.cache.max_len, device=dev)
    mask = (keys[None, None] <= slots[None, :, None]) & (keys >= st.pad[:, None])[:, None]  # [1, T, S] causal
    logits = model(torch.tensor([tokens], device=dev), slots[None] - st.pad[:, None], mask, cache=st.cache,
                   slots=slots)[0]
    x = next_tokens(logits, st.banned, temperature, st.seed.expand(T), index + torch.arange(T, device=dev))
    # The one host sync per verify step, inherent to speculative decoding: how many draft tokens are
    # accepted decides where the next forward starts and what the next draft is (looked up on the host).
    return x.tolist()


if TYPE_CHECKING:  # orl.engine.ar imports this module, not the other way round
    from orl.engine.ar import ARDecoder


def run_speculative(dec: ARDecoder, prompt_ids: list[list[int]], cfg: ARConfig, seeds: list[int] | None = None,
                    emit: bool = False) -> Iterator[Event]:
    """ARDecoder.run with cfg.spec_tokens > 0 (cfg checked: ARDecoder.check), one prompt: a BlockEvent per
    verify round when emit (the tokens and text so far), then the DoneEvent."""
    if len(prompt_ids) != 1:
        raise UnsupportedSetting(f"speculative decoding (spec_tokens {cfg.spec_tokens}) runs at batch 1, got a "
                                 f"batch of {len(prompt_ids)}: decode prompts one at a time (orl eval: --batch-size 1)",
                                 field="spec_tokens")
    mask_id = getattr(dec.tokenizer, "mask_id", None)
    fused = cfg.spec_draft == "fused"
    clock = Clock(dec.device)
    # checks the request, prefills prompt[:-1]; a fused round's draft groups need scratch slots
    extra = scratch_slots(cfg.spec_tokens, cfg.max_new_tokens, cfg.spec_groups) if fused else 0
    st = dec.setup(prompt_ids, cfg, seeds, extra=extra)
    prefill_s = clock()
    prompt = list(prompt_ids[0])
    stops = {dec.eos_id, *dec.eos_ids}
    lookup = PromptLookup(prompt, cfg.spec_ngram)
    strings, hit = Stops(dec.tokenizer, cfg.stop), None
    out: list[int] = []
    slot, forwards, rounds = len(prompt) - 1, 0, 0  # slot: where the last known token (first: the prompt's) goes
    ahead: list[int] = []   # fused: the draft the last round's forward made for this one,
    second: list[int] = []  # and its second choices (the guesses of the bonus token after a rejection)
    conf: list[list[float]] = []  # and (spec_groups) its top-2 probabilities, which pick the next groups
    while len(out) < cfg.max_new_tokens and not (out and out[-1] in stops) and hit is None:
        k = min(cfg.spec_tokens, cfg.max_new_tokens - len(out) - 1)
        # fused: the groups draft for the next round, which can use at most this many tokens
        m = min(cfg.spec_tokens, cfg.max_new_tokens - len(out) - 2)
        if fused and m > 0:
            draft, guesses = ahead[:k], second[:k]
            # spec_groups: only the groups the draft's confidences make likely, a shorter forward
            groups = (likely_groups(conf[:len(draft)], cfg.spec_groups) if cfg.spec_groups
                      else all_groups(len(draft) + 1, len(guesses)))
            r = fused_verify(dec.model, st, slot, lookup.seq[-1:] + draft, guesses, m, mask_id, cfg.temperature,
                             len(out), groups, bool(cfg.spec_groups))
            targets = r.targets
        else:
            if fused:  # the last round: nothing left to draft for
                draft = ahead[:k]
            elif cfg.spec_draft == "diffusion":
                draft = diffusion_draft(dec.model, st, slot, lookup.seq[-1], k, mask_id)
                forwards += bool(draft)
            else:
                draft = lookup.draft(k)
            targets = verify(dec.model, st, slot, lookup.seq[-1:] + draft, cfg.temperature, len(out))
        forwards += 1
        n = accepted(draft, targets)
        if fused and m > 0:  # the group whose context is right: the guess group when its guess was the bonus token,
            # else the mask group of this acceptance length (it reads past the bonus slot); none: no draft next round
            hit_guess = n < len(guesses) and guesses[n] == targets[n] and (n, True) in groups
            g = groups.index((n, hit_guess)) if hit_guess or (n, False) in groups else None
            ahead, second, conf = ([], [], []) if g is None else (r.drafts[g], r.seconds[g],
                                                                  r.probs[g] if r.probs else [])
        new = targets[: n + 1]
        stop = next((i for i, t in enumerate(new) if t in stops), None)
        new = new if stop is None else new[: stop + 1]
        if strings and (hit := strings.find(out + new, len(out))) is not None:  # a stop string (orl.engine.stops)
            new = new[: hit.n_tokens - len(out)]
        out += new
        lookup.extend(new)
        slot += len(new)  # the rollback: rejected draft slots are overwritten by the next verify before use
        if emit:
            yield BlockEvent(rounds, len(new), [list(out)], [strings.visible(out, hit)], forwards)  # stop-safe text
        rounds += 1
    st.cache.length.fill_(slot)  # the state as ar_step would leave it (a host value written, not read)
    total_s = clock()
    yield DoneEvent([Generation(prompt_ids=prompt, token_ids=out, text=hit.text if hit else dec.tokenizer.decode(out),
                                finished=out[-1] in stops or hit is not None, prefill_forwards=int(len(prompt) > 1),
                                step_forwards=forwards, commit_forwards=0, prefill_s=prefill_s, total_s=total_s,
                                stop=hit and hit.stop)])
