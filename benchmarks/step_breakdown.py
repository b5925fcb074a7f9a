#!/usr/bin/env python
"""Where a dlmrt request's time goes beyond its forwards (companion of benchmarks/latency.py).

Times, in one process with interleaved rounds and medians (noisy machines), per denoising step:
  bare        the model call a step makes (captured from block_forward), alone
  mask+pos    slot_meta + visibility + see_self_if_blind + positions (what block_forward adds before it)
  ban         ban_tokens on the logits
  select      select_tokens (log_softmax, argmax, confidence, entropy)
  commit      commit_positions (threshold rule: a rank via argsort)
  step        denoise_step as a whole (block_forward + everything after it, state updates included)
  chunk+check the engine's ChunkRunner call plus the bool() host check, as Engine.run does it
and per request: generate() wall, its forwards, and what is left after forwards x step (prefill,
begin_block, per-block .tolist(), eager commit forward, Python). With --compile the same for the
torch.compile path (compiled bare forward vs compiled run_chunk). Last, the bare forward against
static caches of several sizes: every step attends the whole cache buffer (masked), so its size
sets the attention cost.

    python benchmarks/step_breakdown.py [--gen-len 256 --block-len 32 --rounds 7]
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import latency  # noqa: E402
from orl.engine import Engine  # noqa: E402
from orl.engine.commit import commit_positions  # noqa: E402
from orl.engine.decode import block_forward, denoise_step, run_chunk, slot_meta  # noqa: E402
from orl.engine.sampling import select_tokens  # noqa: E402
from orl.model.vocab import ban_tokens  # noqa: E402
from orl.model.masks import see_self_if_blind, visibility  # noqa: E402
from orl.tokenizer import CharTokenizer  # noqa: E402


class OpCount(TorchDispatchMode):
    """Counts the aten ops a call dispatches: on CPU at batch 1 each costs a few microseconds of
    dispatch whatever its size, so op counts explain eager time better than flops (and are not noisy)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket).removeprefix("aten.")] += 1
        return func(*args, **(kwargs or {}))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--gen-len", type=int, default=256)
    p.add_argument("--block-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also break down the torch.compile path")
    p.add_argument("--cache-sizes", default="96,192,305,512", help="cache slots to time the bare forward at")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = latency.random_model(0), CharTokenizer()
    largs = latency.parse_args(["--gen-len", str(a.gen_len), "--block-len", str(a.block_len)])
    cfg = latency.decode_config(largs, "eager", 1)
    prompt = tok.encode(latency.DEFAULT_PROMPT)
    L = a.block_len
    max_len = len(prompt) + -(-a.gen_len // L) * L
    eng = Engine(model, tok, max_len=max_len)
    st, P = eng.setup([prompt], cfg)
    eng.begin_block(st, cfg, P, 0, [True])
    call = {}
    h = model.register_forward_pre_hook(lambda _m, args, kw: call.update(args=args, kw=kw), with_kwargs=True)
    with torch.no_grad():
        logits = block_forward(model, st, cfg, eng.ids)
    h.remove()
    fargs, fkw = call["args"], call["kw"]
    B = 1
    x, conf, ent = select_tokens(logits, 0.0, None)
    n_valid = torch.full((B,), L)

    def mask_pos():
        slots = st.start + torch.arange(L)
        k_block, k_state = slot_meta(st)
        q_block = (1 + (st.start - st.prompt_end) // L).expand(L)
        mask = visibility(q_block, torch.ones_like(q_block), k_block, k_state, st.valid)
        return see_self_if_blind(mask), slots[None] - st.pad[:, None]

    def fresh_block():
        # keep the block unresolved so every timed step does the full work (a resolved block's step
        # is a commit forward: same cost, but keep the state realistic)
        if not bool(st.unresolved.any()):
            eng.begin_block(st, cfg, P, 0, [True])

    def step():
        denoise_step(model, st, cfg, eng.ids)
        fresh_block()

    def chunk_check():
        bool(eng.runner(st, cfg))
        fresh_block()

    pieces = {
        "bare": lambda: model(*fargs, **fkw),
        "mask+pos": mask_pos,
        "ban": lambda: ban_tokens(logits, eng.ids.banned),
        "select": lambda: select_tokens(logits, 0.0, None),
        "commit": lambda: commit_positions(cfg, conf, ent, st.unresolved, st.steps, n_valid),
        "step": step,
        "chunk+check": chunk_check,
        "fresh_block check": fresh_block,
    }
    if a.compile:
        cbare = torch.compile(lambda: model(*fargs, **fkw), fullgraph=True, dynamic=False)
        cchunk = torch.compile(run_chunk, fullgraph=True, dynamic=False)

        def cstep():
            bool(cchunk(model, st, cfg, eng.ids))
            fresh_block()
        pieces["compiled bare"] = cbare
        pieces["compiled chunk+check"] = cstep
    times = {k: [] for k in pieces}
    with torch.no_grad():
        for fn in pieces.values():
            for _ in range(3):
                fn()
        for _ in range(a.rounds):
            for k, fn in pieces.items():
                n = 30 if "bare" in k or "step" in k or "chunk" in k else 300
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[k].append((time.perf_counter() - t0) / n)
        # whole requests, interleaved with one more batch of bare forwards each
        walls, bares, fwds = [], [], 0
        for _ in range(3):
            g = eng.generate_ids([prompt], cfg)[0]
            walls.append(g.total_s)
            fwds = g.forwards
            t0 = time.perf_counter()
            for _ in range(30):
                model(*fargs, **fkw)
            bares.append((time.perf_counter() - t0) / 30)
        counts = {}
        eng.begin_block(st, cfg, P, 0, [True])
        for k, fn in [*((k, pieces[k]) for k in ("bare", "mask+pos", "ban", "select", "commit")),
                      ("step", lambda: denoise_step(model, st, cfg, eng.ids))]:
            with OpCount() as c:
                fn()
            counts[k] = c.ops
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"# per-step pieces, ms (median of {a.rounds} rounds; gen-len {a.gen_len}, block-len {L}, "
          f"cache {max_len} slots, {torch.get_num_threads()} thread)")
    for k, v in med.items():
        print(f"{k:>22}: {v:8.3f}")
    print("# aten ops per call: " + ", ".join(f"{k} {sum(v.values())}" for k, v in counts.items()))
    extra = counts["step"] - counts["bare"]
    print(f"# ops a step adds to its forward ({sum(extra.values())}): "
          + ", ".join(f"{k} {n}" for k, n in extra.most_common()))
    fresh = med.pop("fresh_block check")
    print(f"{'step - bare':>22}: {med['step'] - fresh - med['bare']:8.3f}  "
          f"(step overhead ratio {(med['step'] - fresh) / med['bare']:.3f})")
    print(f"{'chunk+check - step':>22}: {med['chunk+check'] - med['step']:8.3f}  (runner call + host check)")
    wall, bare = statistics.median(walls) * 1e3, statistics.median(bares) * 1e3
    per_step = med["chunk+check"] - fresh
    print(f"# request: wall {wall:.0f} ms, {fwds} forwards, bare {bare:.3f} ms -> overhead {wall / (fwds * bare):.3f}; "
          f"forwards x (runner step) = {fwds * per_step:.0f} ms, rest (prefill, per-block host work, "
          f"eager commit forwards, Python) = {wall - fwds * per_step:.0f} ms")
    sizes = [int(x) for x in a.cache_sizes.split(",") if x]
    timers = {}
    for S in sizes:  # the answer must fit setup()'s check: shorten it for small caches
        new = max(L, (S - len(prompt)) // L * L)
        c = latency.decode_config(latency.parse_args(["--gen-len", str(new), "--block-len", str(L)]), "eager", 1)
        if len(prompt) + new <= S:
            timers[S] = latency.bare_forward(model, tok, prompt, c, S, "eager", torch.device("cpu"))
    by_size = {S: [] for S in timers}
    for _ in range(a.rounds):
        for S, t in timers.items():
            by_size[S].append(t())
    print("# bare forward vs cache slots: " + ", ".join(
        f"{S}: {statistics.median(v) * 1e3:.3f} ms" for S, v in by_size.items()))
    if a.compile:
        print(f"# compile: chunk+check / bare = {(med['compiled chunk+check'] - fresh) / med['compiled bare']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
