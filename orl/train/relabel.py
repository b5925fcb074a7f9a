"""Reference relabelling of unverified rollouts (ORLConfig.relabel = "reference").

Why: ORL keeps only verified rollouts, so a model whose parallel decoder is right on a third of the
prompts learns from the easy third, and the states where it goes wrong - the ones that cost accuracy
when it commits more per step - never get a target. The states an unverified rollout visited *before
its first wrong commit* are states the current weights really reach with the exact residual they
consumed, and on them a correct answer is a correct continuation. Those states are kept with that
answer as target (on-policy states, an oracle's labels: DAgger's recipe); the rest of the rollout is
dropped: after a wrong commit the cache holds tokens the answer does not continue, so no target there
is right.

The answer: a verified rollout of the same prompt when there is one (the one `keep` kept first: with
several valid answers, the wrong siblings then learn the answer the update distils, not a second one),
else the sample's reference (`Sample.answer`), used only when the task's own verifier accepts it and
tokenized as the training corpus tokenizes it, after its prompt (orl.train.corpus).

A state is usable when every answer token committed before it (earlier blocks, and the committed
slots of its own canvas) equals the answer's token there; the usable states are a prefix of the trace
(the threshold rule never undoes a commit), so the relabelled rollout is that prefix. Any end id
(`eos_ids`: EOS, end of turn) counts as the end of the answer. A task that ends at a stop string (k-shot
and one-line tasks: the newline) ends its reference with the stop string's tokens instead of an end id; the
engine commits tokens after a stop string inside its block and drops them, so those slots are neither
compared nor targets (make_unit: IGNORE past a stop).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from orl.engine import DecodeConfig
from orl.engine.stops import with_stop
from orl.eval.tasks import get_task
from orl.eval.tasks.custom import reward_of
from orl.model.vocab import SpecialIds, is_eos
from orl.tokenizer import TokenizerError
from orl.train.replay import canvas_start
from orl.train.rollout import Rollout


def reference_ids(tok, prompt: str, answer: str, eos_id: int, stop: str | None = None) -> list[int] | None:
    """The answer's tokens as the corpus tokenizes them after the prompt, then EOS (or, with `stop`, the
    tokens of answer + stop: the rollout ends with the token that completes the stop string); None when the
    prompt's own tokens are not a prefix of the whole's (the answer would start inside a prompt token) or the
    tokenizer cannot encode the answer."""
    try:
        p, full = tok.encode(prompt), tok.encode(prompt + answer + (stop or ""))
    except TokenizerError:
        return None
    if full[:len(p)] != p or len(full) == len(p):
        return None
    return full[len(p):] if stop else full[len(p):] + [eos_id]


def relabel(r: Rollout, ref: list[int], ids: SpecialIds, block_len: int, layout: str,
            max_new_tokens: int, stop: str | None = None) -> Rollout | None:
    """The rollout's states before its first commit that disagrees with `ref` (ending with an end id, or with
    `stop`'s tokens: then the slots past ref are not compared), with `ref` as the answer (so make_unit targets
    it); None when no state is usable."""
    g, L, eos = r.gen, block_len, ids.eos
    if g.trace is None:
        raise ValueError("relabelling needs the rollout's trace (collect decodes with trace=True)")

    def same_end(t: torch.Tensor) -> torch.Tensor:  # every end id read as EOS, the id eos_fill commits
        return torch.where(is_eos(t, ids), eos, t)

    n, width = len(g.prompt_ids), max_new_tokens
    c = canvas_start(layout, n, L)
    # [W] the answer, EOS-filled as eos_fill commits; past a stop string's answer -1: no committed token follows it
    want = same_end(torch.tensor((ref + [-1 if stop else eos] * width)[:width]))
    care = torch.arange(width) < (len(ref) if stop else width)  # [W] slots whose commit must follow ref
    wrote = same_end(torch.tensor((g.token_ids + [eos] * width)[:width]))  # [W] what the rollout committed
    agree = (want == wrote).long().cumprod(0)  # [W] 1 while the rollout's answer still follows `ref`
    usable = []
    for rec in g.trace:
        lo = c + rec.block * L - n  # answer index of the canvas's first slot (< 0: prompt tail, absolute_grid)
        if lo > 0 and not agree[lo - 1]:
            break  # an earlier block went wrong: the cache holds tokens `ref` does not continue
        if stop and lo >= len(ref):
            break  # a block wholly past the stop: the answer had ended, nothing here is a target
        a = torch.arange(lo, lo + L)
        inside = (a >= 0) & (a < width)
        fixed = inside & ~rec.unresolved & care[a.clamp(0, width - 1)]
        if bool((same_end(rec.canvas[fixed]) != want[a[fixed]]).any()):
            break
        # proposals `ref` contradicts are left out of L_KL's anchor (it acts with stale rollouts): the update is
        # meant to move them
        ok = torch.ones(L, dtype=torch.bool)
        ok[inside] = (same_end(rec.tokens[inside]) == want[a[inside]]) | ~care[a[inside]]
        usable.append(replace(rec, confidence=torch.where(ok, rec.confidence, torch.zeros_like(rec.confidence))))
    if not usable:
        return None
    # the answer up to the end of the last kept state's block: no state sees past it, and the replay's rows
    # end there (make_unit sizes a row from the trace's blocks when max_new_tokens is not given)
    answer = ref[:min(width, c + (usable[-1].block + 1) * L - n)]
    whole = stop is not None and len(answer) == len(ref)  # ends with the stop: make_unit ignores the slots after it
    return Rollout(r.sample, replace(g, token_ids=answer, trace=usable, stop=stop if whole else None,
                                     finished=whole or answer[-1] in (eos, *ids.eos_ids)),
                   verified=False, reward=r.reward)


def relabel_unverified(rollouts: list[Rollout], kept: list[Rollout], group: int, tok, ids: SpecialIds,
                       cfg: DecodeConfig, keep_reward: float = 1.0) -> list[Rollout]:
    """Every unverified rollout's usable states (relabel), toward a kept sibling's answer or else the verified
    reference. `rollouts` come grouped as collect returns them (`group` a prompt), decoded with `cfg` and each
    task's stop strings as collect decodes them (orl.engine.stops.with_stop); with stop strings the reference ends
    with the first one (a sibling's answer ends as its rollout did: at one of them, or at an end id). Left out:
    references their verifier rejects (an empty `answer` of a regex family), that hold a stop string (the decode
    would end inside them) or that do not tokenize after their prompt, rollouts with no usable state."""
    out, kept_ids = [], {id(r) for r in kept}
    for i in range(0, len(rollouts), group):
        rows = rollouts[i:i + group]
        s = rows[0].sample
        task = get_task(s.task)
        if all(r.verified for r in rows):
            continue
        stops = with_stop(cfg, tuple(task.stop)).stop  # what the rollouts decoded with
        # a sibling's answer is whole: it ended at an end id or at one of the stop strings
        sibling = next((r for r in rows if id(r) in kept_ids and r.gen.finished
                        and (r.gen.stop is None or r.gen.stop in stops)), None)
        end = sibling.gen.stop if sibling is not None else (stops[0] if stops else None)
        if sibling is not None:
            ref = list(sibling.gen.token_ids)
        elif (s.answer and not any(x in s.answer for x in stops)
              and reward_of(task, s.prompt, s.answer) >= keep_reward):
            ref = reference_ids(tok, s.prompt, s.answer, ids.eos, end)
        else:
            ref = None
        if ref is None:
            continue
        for r in rows:
            if not r.verified:
                x = relabel(r, ref, ids, cfg.block_len, cfg.layout, cfg.max_new_tokens, end)
                if x is not None:
                    out.append(x)
    return out
