"""Full-sequence decoding (DESIGN section 2; LLaDA, Dream / DiffuCoder), the exact mode.

One bidirectional window over prompt + the whole answer canvas: every step runs the model over all
P + max_new_tokens positions, future masks included, with no KV cache (a cached prompt or answer block
would be stale: under bidirectional attention every position depends on every other). Semi-autoregressive
blocks of cfg.block_len only restrict which positions may commit: block j's window is answer positions
[j L, (j + 1) L), decoded with the engine's token selection and commit rules until resolved (LLaDA's
generate(); Dream's diffusion_generate is one window when block_len >= max_new_tokens). A shifted model
(Dream) reads position i off the hidden state at i - 1, the answer's first token off the prompt's last.

Per step the code is pure tensor work on the request's buffers (no host value read inside a step); the
host checks "window resolved" once per step. Residual modes and traces are refused by name here.

cfg.full_sequence_cache names Fast-dLLM v1's caches, approximate modes of this one (the exact
'none' stays the default). Both start every window with the exact full forward (its logits make the
window's first step), writing every position's K/V into a [layers, B, Hkv, P + N, Dh] cache; the
window's later steps then run only part of the row against it:
  prefix  queries = the window and everything after it (slots lo..T), whose K/V are rewritten each
          step; the K/V before the window stay as computed at the window's start;
  dual    queries = the window only; the K/V before it and after it (the future masked windows) both
          stay as computed at the window's start.
Approximate because under bidirectional attention the cached K/V depend on the canvas of the window's
start, not on what the window has committed since. A shifted model (Dream) reads the window's first
position off the state before it, taken from the window's first forward (Fast-dLLM's Dream loop reads
it off the first position's own state instead).
"""
from __future__ import annotations

from typing import Iterator

import torch

from orl.engine.commit import commit_positions, rank_score
from orl.engine.config import DecodeConfig, UnsupportedSetting
from orl.engine.events import BlockEvent, DoneEvent, Event
from orl.engine.request import Clock, check_request
from orl.engine.sampling import hash_uniform, select_tokens, top_p_then_top_k
from orl.engine.sequence import Row
from orl.engine.stops import Stops
from orl.model.masks import see_self_if_blind
from orl.model.padding import left_pad
from orl.model.vocab import is_eos


def check(cfg: DecodeConfig, trace: bool) -> None:
    problems = []  # (the field it concerns or None, what)
    if cfg.residual != "off":
        problems.append(("residual", f"residual={cfg.residual!r} (the full-sequence layout decodes with residual "
                                     "'off')"))
    if trace:
        problems.append((None, "traces / step events (not recorded in the full-sequence layout)"))
    if cfg.cuda_graph or cfg.compile:
        problems.append(("cuda_graph" if cfg.cuda_graph else "compile",
                         "cuda_graph / compile (the full-sequence layout runs eagerly)"))
    if cfg.full_sequence_cache != "none" and cfg.cfg_scale:
        problems.append(("cfg_scale", f"cfg_scale with full_sequence_cache={cfg.full_sequence_cache!r} (guidance "
                                      "runs in the exact mode only)"))
    if problems:
        field = next((f for f, _ in problems if f is not None), None)
        raise UnsupportedSetting("the full-sequence layout does not support: " + "; ".join(w for _, w in problems),
                                 field)


def window_logits(model, tokens, pos, mask, lo: int, hi: int, prompt_slots, mask_id: int, scale: float,
                  cache=None):
    """(logits [B, hi - lo, V] of the window, the state before it [B, D]) from one forward over the whole
    row; with a cache, every position's K/V are written to it. scale > 0: LLaDA generate()'s
    classifier-free guidance, u + (scale + 1)(c - u), u the logits of a copy whose prompt tokens are all
    masked (one forward of 2B)."""
    if scale > 0:
        both = torch.cat([tokens, tokens.masked_fill(prompt_slots, mask_id)])
        h = model(both, pos.repeat(2, 1), mask.repeat(2, 1, 1), return_hidden=True)
        c, u = model.read_out(h[:, lo:hi], before=h[:, lo - 1]).float().chunk(2)
        return u + (scale + 1) * (c - u), None
    slots = None if cache is None else torch.arange(tokens.shape[1], device=tokens.device)
    h = model(tokens, pos, mask, cache=cache, slots=slots, return_hidden=True)
    return model.read_out(h[:, lo:hi], before=h[:, lo - 1]), h[:, lo - 1]


def cached_window_logits(model, tokens, pos, mask, lo: int, hi: int, cache, before, mode: str):
    """Logits [B, hi - lo, V] of the window from a forward of its queries only against the cache
    (mode 'prefix': slots lo..T; 'dual': lo..hi); their fresh K/V replace the cached ones."""
    end = tokens.shape[1] if mode == "prefix" else hi
    slots = torch.arange(lo, end, device=tokens.device)
    h = model(tokens[:, lo:end], pos[:, lo:end], mask[:, lo:end], cache=cache, slots=slots, return_hidden=True)
    return model.read_out(h[:, :hi - lo], before=before)


def propose(cfg: DecodeConfig, logits, unresolved, steps, n_valid, seed, global_step):
    """One step's proposals x [B, L] and the positions to commit [B, L] from the window's logits
    [B, L, V]: pure tensor work, no host value read. top_k / top_p cut the distribution in Dream's order
    (sample_tokens: nucleus, then top-k) whenever set, at T = 0 too: the greedy token is the same, but
    the confidences are the truncated distribution's, as Dream's. The rules get the rows' seeds and noise
    counters (rule 'dream' with alg_temp draws its positions)."""
    if cfg.top_k > 0 or cfg.top_p < 1:
        logits = top_p_then_top_k(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    noise = hash_uniform(seed, global_step, logits.shape[1], logits.shape[-1]) if cfg.temperature > 0 else None
    x, conf, ent = select_tokens(logits, cfg.temperature, noise, entropy=cfg.rule == "entropy")
    conf = rank_score(cfg.confidence, logits, x, conf, cfg.temperature, seed, global_step)
    return x, commit_positions(cfg, conf, ent, unresolved, steps, n_valid, seed=seed, noise_step=global_step)


@torch.no_grad()
def run(engine, prompt_ids: list[list[int]], cfg: DecodeConfig, *, trace: bool = False,
        seeds: list[int] | None = None) -> Iterator[Event]:
    """Engine.run for cfg.layout == 'full_sequence': the same events (a BlockEvent per window)."""
    check(cfg, trace)
    model, ids, dev, L, N = engine.model, engine.ids, engine.device, cfg.block_len, cfg.max_new_tokens
    P, seeds = check_request(prompt_ids, N, f"{N} answer tokens", engine.max_len, seeds, cfg.seed)
    clock = Clock(dev)
    prompt, pad = left_pad(prompt_ids, engine.pad_id)
    B, T = len(prompt_ids), P + N
    tokens = torch.cat([prompt, torch.full((B, N), engine.mask_id)], 1).to(dev)
    slot = torch.arange(T, device=dev)
    valid = slot[None] >= pad.to(dev)[:, None]                      # [B, T] pad keys are invisible
    mask = see_self_if_blind(valid[:, None, :].expand(B, T, T))     # bidirectional over the whole row
    pos = (slot[None] - pad.to(dev)[:, None]).clamp(min=0)
    seed = torch.tensor(seeds, dtype=torch.long, device=dev)
    global_step = torch.zeros(B, dtype=torch.long, device=dev)
    stops = Stops(engine.tokenizer, cfg.stop)
    rows = [Row(list(p), stops=stops) for p in prompt_ids]
    banned = torch.zeros(model.args.vocab_size, dtype=torch.bool, device=dev)
    banned[list(ids.banned)] = True
    prompt_slots = valid & (slot[None] < P)  # LLaDA's guidance masks these in its unconditional copy
    n_blocks = -(-N // L)
    mode = cfg.full_sequence_cache
    cache = None if mode == "none" else model.new_cache(B, T)
    for j in range(n_blocks):
        lo, hi = P + j * L, min(P + (j + 1) * L, T)
        live = torch.tensor([not r.finished for r in rows], device=dev)
        unresolved = live[:, None] & (tokens[:, lo:hi] == engine.mask_id)
        n_valid = torch.full((B,), hi - lo, device=dev)
        steps = torch.zeros(B, dtype=torch.long, device=dev)
        fresh = True  # the window's first step: the exact forward (which refills the cache)
        while bool(unresolved.any()):  # the one host check per step
            if fresh:
                logits, before = window_logits(model, tokens, pos, mask, lo, hi, prompt_slots, engine.mask_id,
                                               cfg.cfg_scale, cache)
                fresh = cache is None
            else:
                logits = cached_window_logits(model, tokens, pos, mask, lo, hi, cache, before, mode)
            logits = logits.masked_fill(banned, float("-inf"))  # after guidance: -inf - -inf would be NaN
            x, commit = propose(cfg, logits, unresolved, steps, n_valid, seed, global_step)
            window = torch.where(commit, x, tokens[:, lo:hi])
            active = unresolved.any(-1)  # a step counts even when it commits nothing (Dream's schedule may)
            unresolved = unresolved & ~commit
            if cfg.eos_fill:
                eos = is_eos(window, ids) & ~unresolved
                after = eos.cumsum(-1) > eos
                window = torch.where(after & unresolved, ids.eos, window)
                unresolved = unresolved & ~after
            tokens[:, lo:hi] = window
            steps += active
            global_step += active
        now = clock()
        block, n_steps = tokens[:, lo:hi].cpu().tolist(), steps.cpu().tolist()
        for row, toks, n in zip(rows, block, n_steps):
            if not row.finished:
                row.add_block(toks, n, engine.ids.eos_ids, now, last=j == n_blocks - 1)
        yield BlockEvent(j, hi - lo, [list(r.token_ids) for r in rows], [r.text(engine.tokenizer) for r in rows])
        if all(r.finished for r in rows):
            break
    yield DoneEvent([r.generation(engine.tokenizer, 0.0) for r in rows])
