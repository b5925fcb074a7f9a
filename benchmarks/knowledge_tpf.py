"""The TPF a model's own argmaxes allow: how many tokens a forward a perfectly calibrated copy of THIS model could
commit, the ceiling of any loss that only reshapes its confidence (AEC, certainty forcing) without teaching it more.

The block decoder runs as served (the engine's eager, traced step: the same forwards, residual and commit
forwards), except for what each step commits: every unresolved answer position whose argmax is already the
reference token, and when there is none, the reference token at the most confident position (a forward that
learnt one token). The output is then always the reference, and its TPF the number of tokens the model's own
predictions got right a forward along that trajectory. Beside it, the threshold decoder on the same prompts.
The reference (`--reference own`, the default) is the threshold decoder's own answer where that is right, else the
task's reference: on a family with many right answers (split7xp, constr7xp, keysort7x) the ceiling is then the one
along the answer the model chose, and on its wrong prompts a lower bound (another right answer might have more right
argmaxes); on single-answer families (long7xp, prog7xp) both are the one right answer.

    python benchmarks/knowledge_tpf.py --model checkpoints/orl-tiny7-orl --tasks long7xp,prog7xp --seeds 0 1 2

A diagnostic: it wraps the engine's eager step for its own run; nothing it changes reaches serving.
"""
from __future__ import annotations

import argparse
import contextlib
import json

import torch

import orl.engine.engine as engine_mod
from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.eval.tasks import get_task, make_samples
from orl.model.vocab import is_eos


def answer_offset(plan, j: int, L: int, max_new: int, b: int) -> int:
    """Answer tokens that row b's blocks before j hold."""
    return sum(hi - lo for lo, hi in (plan.block_span(i, L, max_new)[b] for i in range(j)))


class Oracle:
    """The reference-gated commit, applied after each engine step. refs [B, max_new]: the reference answer's ids,
    then EOS to max_new (an answer longer than max_new is cut there)."""

    def __init__(self, refs: torch.Tensor, max_new: int):
        self.refs, self.max_new = refs, max_new
        self.ref = None  # [B, L] the current block's reference (begin)
        self.right = self.forced = 0  # positions committed because the argmax was right / forced

    def begin(self, st, j: int) -> None:
        """Block j's reference at its answer positions, -1 elsewhere (a prompt tail): constant over its steps."""
        L = st.block_len
        ref = torch.full((self.refs.shape[0], L), -1, dtype=torch.long)
        for b, (lo, hi) in enumerate(st.plan.block_span(j, L, self.max_new)):
            off = answer_offset(st.plan, j, L, self.max_new, b)
            ref[b, lo:hi] = self.refs[b, off: off + hi - lo]
        self.ref = ref.to(st.canvas.device)

    def step(self, step_fn, model, st, cfg, ids, record: bool = False, fused: bool = False) -> None:
        canvas0, unres0 = st.canvas.clone(), st.unresolved.clone()  # [B, L]
        step_fn(model, st, cfg, ids, record=True, fused=fused)  # the forward, residual and counters as served
        ref = self.ref
        live = unres0 & (ref >= 0)
        right = live & (st.last_x == ref)
        conf = st.last_conf.masked_fill(~live, float("-inf"))  # any confidence kind (neg_entropy is below -1)
        top = torch.zeros_like(live).scatter_(1, conf.argmax(-1, keepdim=True), True) & live
        forced = top & ~right.any(-1, keepdim=True)
        commit = right | forced
        # a live row that committed nothing would loop for ever in the engine's `while not done`
        assert not (live.any(-1) & ~commit.any(-1)).any(), "oracle step committed nothing on a live row"
        canvas = torch.where(commit, ref, canvas0)
        unresolved = unres0 & ~commit
        eos = is_eos(canvas, ids) & ~unresolved & ~st.fixed
        after = (eos.cumsum(-1) > eos) & unresolved  # past a committed EOS every reference position is EOS
        canvas = torch.where(after, ids.eos, canvas)
        st.canvas.copy_(canvas)
        st.unresolved.copy_(unresolved & ~after)
        st.last_commit.copy_(commit | after)
        self.right += int(right.sum()) + int(after.sum())
        self.forced += int(forced.sum())


@contextlib.contextmanager
def oracle_engine(engine: Engine, oracle: Oracle):
    """The engine's eager step and block start wrapped for one run (restored after)."""
    step_fn, begin = engine_mod.denoise_step, engine.begin_block

    def begin_block(st, cfg, P, j, live, fused):
        out = begin(st, cfg, P, j, live, fused)
        oracle.begin(st, j)
        return out

    engine_mod.denoise_step = lambda *a, **k: oracle.step(step_fn, *a, **k)
    engine.begin_block = begin_block
    try:
        yield
    finally:
        engine_mod.denoise_step = step_fn
        del engine.begin_block


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks", default="long7xp,prog7xp,split7xp,constr7xp,keysort7x")
    ap.add_argument("--split", default="heldout")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--limit", type=int, default=100, help="prompts per family and seed")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--max-new-tokens", type=int, default=104)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--reference", choices=("own", "task"), default="own",
                    help="own: where the threshold decoder's answer is right (and ends with EOS), that answer; "
                         "else the task's reference. task: always the task's reference")
    ap.add_argument("--out", help="JSON of the per-family sums")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tok, manifest = load_checkpoint(args.model)
    engine = Engine(model, tok, manifest=manifest)
    cfg = DecodeConfig.from_manifest(manifest, threshold=args.threshold, max_new_tokens=args.max_new_tokens).validate()
    if cfg.rule != "threshold" or not cfg.eos_fill:  # the oracle replaces exactly this rule's commit (and its EOS fill)
        raise SystemExit(f"knowledge_tpf.py: {args.model} decodes with rule {cfg.rule!r}, eos_fill {cfg.eos_fill}; "
                         "the oracle stands in for the threshold rule with EOS fill only")
    eos = engine.ids.eos
    rows = {}
    for fam in args.tasks.split(","):
        task = get_task(fam)
        sums = dict(n=0, correct=0, tokens=0, forwards=0, o_tokens=0, o_forwards=0, o_right=0, o_forced=0,
                    c_tokens=0, c_forwards=0, c_o_tokens=0, c_o_forwards=0)
        for seed in args.seeds:
            samples = make_samples(fam, args.split, args.limit, seed)
            for i in range(0, len(samples), args.batch):
                chunk = samples[i: i + args.batch]
                prompts = [engine.encode(s.prompt) for s in chunk]
                plain = engine.generate_ids(prompts, cfg)
                refs = torch.full((len(chunk), args.max_new_tokens), eos, dtype=torch.long)
                oks = [bool(task.verify(s.prompt, p.text)) for s, p in zip(chunk, plain)]
                for b, (s, p, ok) in enumerate(zip(chunk, plain, oks)):
                    own = ok and args.reference == "own" and p.token_ids[-1:] == [eos]
                    ans = (p.token_ids[:-1] if own else engine.encode(s.answer))[: args.max_new_tokens]
                    refs[b, : len(ans)] = torch.tensor(ans, dtype=torch.long)
                oracle = Oracle(refs, args.max_new_tokens)
                with oracle_engine(engine, oracle):
                    gens = engine.generate_ids(prompts, cfg, trace=True)
                for b, (s, g, p, ok) in enumerate(zip(chunk, gens, plain, oks)):
                    want = refs[b].tolist()
                    want = want[: want.index(eos) + 1] if eos in want else want
                    if g.token_ids != want:  # the oracle must write the reference: else the bound is of something else
                        raise AssertionError(f"{s.task}/{s.index}: oracle wrote {g.token_ids}, reference {want}")
                    sums["n"] += 1
                    sums["correct"] += ok
                    sums["tokens"] += p.n_tokens
                    sums["forwards"] += p.forwards
                    sums["o_tokens"] += g.n_tokens
                    sums["o_forwards"] += g.forwards
                    if ok:  # the prompts the threshold decoder gets right (--reference own: the same answer both ways)
                        sums["c_tokens"] += p.n_tokens
                        sums["c_forwards"] += p.forwards
                        sums["c_o_tokens"] += g.n_tokens
                        sums["c_o_forwards"] += g.forwards
                sums["o_right"] += oracle.right
                sums["o_forced"] += oracle.forced
        rows[fam] = sums
    rows["all"] = {k: sum(r[k] for r in rows.values()) for k in next(iter(rows.values()))}
    print(f"model {args.model}  split {args.split}  seeds {args.seeds}  threshold {args.threshold}  "
          f"reference {args.reference}")
    print(f"{'family':<11} {'n':>5} {'acc':>6} {'TPF':>6} {'oracle':>7} {'x':>5} {'forced/fw':>9} "
          f"{'TPF right':>9} {'oracle right':>12}")
    def div(a, b):
        return a / b if b else float("nan")

    for fam, r in rows.items():
        print(f"{fam:<11} {r['n']:>5} {div(r['correct'], r['n']):>6.3f} {div(r['tokens'], r['forwards']):>6.2f} "
              f"{div(r['o_tokens'], r['o_forwards']):>7.2f} "
              f"{div(r['o_tokens'] * r['forwards'], r['o_forwards'] * r['tokens']):>5.2f} "
              f"{div(r['o_forced'], r['o_forwards']):>9.2f} {div(r['c_tokens'], r['c_forwards']):>9.2f} "
              f"{div(r['c_o_tokens'], r['c_o_forwards']):>12.2f}")
    print("TPF: the threshold decoder, ratio of sums incl. EOS; oracle: every right argmax committed (x: its ratio);")
    print("forced/fw: forwards whose argmaxes held no right token; 'right' columns: the prompts the threshold decoder")
    print("gets right only")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "split": args.split, "seeds": args.seeds, "threshold": args.threshold,
                       "reference": args.reference,
                       "families": rows}, f, indent=1)


if __name__ == "__main__":
    main()
