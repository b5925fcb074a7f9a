"""Reference relabelling of unverified rollouts (ORLConfig.relabel = "reference").

Why: ORL keeps only verified rollouts, so a model whose parallel decoder is right on a third of the
prompts learns from the easy third, and the states where it goes wrong - the ones that cost accuracy
when it commits more per step - never get a target. A task sample carries one reference answer; the
states an unverified rollout visited *before its first wrong commit* are states the current weights
really reach with the exact residual they consumed, and on them the reference is a correct
continuation. Those states are kept with the reference as target (the on-policy states, an oracle's
labels: DAgger's recipe), the rest of the rollout is dropped: after a wrong commit the cache holds
tokens the reference does not continue, so no target there is right.

A state is usable when every answer token committed before it (earlier blocks, and the committed
slots of its own canvas) equals the reference's token there; the trace's usable states are a prefix
(commits are never undone by the threshold rule), so the relabelled rollout is that prefix.

Limits: the reference is the tokenizer's encoding of `Sample.answer` alone followed by EOS (the
tokens the engine would write for it when the answer is tokenized on its own, as for the character
tokenizer); tasks that end at a stop string instead of EOS are not relabelled. On a task with many
valid answers the reference is one of them, so the states before the rollout left it teach that one.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from orl.eval.tasks import get_task
from orl.train.rollout import Rollout


def reference_ids(tok, answer: str, eos_id: int) -> list[int]:
    """The answer's tokens as the engine writes them: no BOS, then EOS."""
    ids = tok.encode(answer)
    bos = getattr(tok, "bos_id", None)
    if bos is not None and ids[:1] == [bos]:
        ids = ids[1:]
    return ids + [eos_id]


def relabel(r: Rollout, ref: list[int], eos_id: int, block_len: int, layout: str, max_new_tokens: int) -> Rollout | None:
    """The rollout's states before its first commit that disagrees with `ref`, with `ref` as the answer
    (so make_unit targets it); None when no state is usable. `ref` ends with EOS (reference_ids)."""
    g, L = r.gen, block_len
    if g.trace is None:
        raise ValueError("relabelling needs the rollout's trace (collect decodes with trace=True)")
    n, width = len(g.prompt_ids), max_new_tokens
    c = n // L * L if layout == "absolute_grid" else n  # the first canvas's position (orl.train.replay.make_unit)
    want = torch.tensor((ref + [eos_id] * width)[:width])   # [W] the reference, EOS-filled as eos_fill commits
    wrote = torch.tensor((g.token_ids + [eos_id] * width)[:width])  # [W] what the rollout committed
    agree = (want == wrote).long().cumprod(0)  # [W] 1 while the rollout's answer still follows the reference
    usable = []
    for rec in g.trace:
        lo = c + rec.block * L - n  # answer index of the canvas's first slot (< 0: prompt tail, absolute_grid)
        if lo > 0 and not agree[lo - 1]:
            break  # an earlier block went wrong: the cache holds tokens the reference does not continue
        a = torch.arange(lo, lo + L)
        inside = (a >= 0) & (a < width)
        fixed = inside & ~rec.unresolved
        if bool((rec.canvas[fixed] != want[a[fixed]]).any()):
            break
        # the proposals the reference contradicts are not anchored (L_KL's confident positions): the update
        # is meant to move them
        ok = torch.ones(L, dtype=torch.bool)
        ok[inside] = rec.tokens[inside] == want[a[inside]]
        usable.append(replace(rec, confidence=torch.where(ok, rec.confidence, torch.zeros_like(rec.confidence))))
    if not usable:
        return None
    # the answer up to the end of the last kept state's block: no state sees past it, and the replay's rows
    # end there (make_unit sizes a row from the trace's blocks when max_new_tokens is not given)
    answer = ref[:min(width, c + (usable[-1].block + 1) * L - n)]
    return Rollout(r.sample, replace(g, token_ids=answer, trace=usable, stop=None, finished=answer[-1] == eos_id),
                   verified=False, reward=r.reward)


def relabel_unverified(rollouts: list[Rollout], tok, eos_id: int, block_len: int, layout: str,
                       max_new_tokens: int) -> list[Rollout]:
    """Every unverified rollout's usable states, relabelled (relabel); tasks that stop at a stop string are
    left out (their answers end at the stop, not at EOS)."""
    out = []
    for r in rollouts:
        if r.verified or get_task(r.sample.task).stop or r.gen.stop is not None:
            continue
        x = relabel(r, reference_ids(tok, r.sample.answer, eos_id), eos_id, block_len, layout, max_new_tokens)
        if x is not None:
            out.append(x)
    return out
