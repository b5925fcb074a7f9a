#!/usr/bin/env python
"""Fused commit forward on vs off (DecodeConfig.fused_commit), batch 1, on trained checkpoints.

Per checkpoint, the same held-out task prompts are decoded with the commit forward fused into the
next block's first step and with it as its own forward, interleaved prompt by prompt in every round
(so both see the same machine load). Reports whether every answer is token-identical, TPF as a
ratio of sums (all tokens / all forwards, DESIGN section 5, prefill excluded) and tokens/s: per
prompt its tokens over its median wall time across rounds (request start to last token), then the
mean and median over prompts, and the aggregate (all tokens / the sum of those median times).

    python benchmarks/fused_commit.py                       # both shipped checkpoints, 20 prompts
    python benchmarks/fused_commit.py --models checkpoints/orl-tiny-orl --limit 40 --repeats 7
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from orl.engine import DecodeConfig, Engine  # noqa: E402
from orl.eval.tasks import make_samples  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="checkpoints/orl-tiny-base,checkpoints/orl-tiny-orl")
    p.add_argument("--tasks", default="all")
    p.add_argument("--split", default="heldout")
    p.add_argument("--limit", type=int, default=20, help="prompts (cycling through the task families)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (median per prompt)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (batch-1 ops are too small to split)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the rows here")
    return p.parse_args(argv)


def timed(engine: Engine, prompt: str, cfg: DecodeConfig):
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    g = engine.generate(prompt, cfg)[0]
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    return g, time.perf_counter() - t0


def bench(model_dir: str, prompts: list[str], args) -> list[dict]:
    engine = Engine.from_checkpoint(ROOT / model_dir if not Path(model_dir).is_absolute() else model_dir, args.device)
    base = DecodeConfig.from_manifest(engine.manifest, max_new_tokens=args.max_new_tokens, threshold=args.threshold)
    cfgs = {"fused": replace(base, fused_commit=True), "unfused": replace(base, fused_commit=False)}
    walls = {k: [[] for _ in prompts] for k in cfgs}
    gens = {k: [None] * len(prompts) for k in cfgs}
    for r in range(args.warmup + args.repeats):
        for i, prompt in enumerate(prompts):
            order = list(cfgs) if (r + i) % 2 == 0 else list(reversed(cfgs))
            for k in order:
                g, wall = timed(engine, prompt, cfgs[k])
                if r >= args.warmup:
                    walls[k][i].append(wall)
                gens[k][i] = g
    same = sum(a.token_ids == b.token_ids for a, b in zip(gens["fused"], gens["unfused"]))
    rows = []
    for k in cfgs:
        tokens = [g.n_tokens for g in gens[k]]
        med = [statistics.median(w) for w in walls[k]]
        per_prompt = [n / t for n, t in zip(tokens, med)]
        rows.append({"model": model_dir, "mode": k, "prompts": len(prompts), "identical": same,
                     "tokens": sum(tokens), "forwards": sum(g.forwards for g in gens[k]),
                     "tpf": sum(tokens) / sum(g.forwards for g in gens[k]),
                     "tok_s_mean": statistics.mean(per_prompt), "tok_s_median": statistics.median(per_prompt),
                     "tok_s_all": sum(tokens) / sum(med), "block_len": base.block_len, "residual": base.residual})
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = [s.prompt for s in make_samples(args.tasks, args.split, args.limit)]
    rows = [row for m in args.models.split(",") for row in bench(m, prompts, args)]
    print(f"batch 1, {args.device}, {args.limit} {args.split} prompts ({args.tasks}), max_new_tokens "
          f"{args.max_new_tokens}, threshold {args.threshold}, medians of {args.repeats} rounds after {args.warmup} warm-up")
    print(f"{'model':32} {'mode':8} {'same':>6} {'tokens':>6} {'fwd':>5} {'TPF':>5} {'tok/s mean':>10} "
          f"{'median':>7} {'all':>7}")
    for r in rows:
        print(f"{r['model']:32} {r['mode']:8} {r['identical']:>3}/{r['prompts']:<2} {r['tokens']:>6} {r['forwards']:>5} "
              f"{r['tpf']:5.2f} {r['tok_s_mean']:10.1f} {r['tok_s_median']:7.1f} {r['tok_s_all']:7.1f}")
    for m in args.models.split(","):
        f, u = (next(r for r in rows if r["model"] == m and r["mode"] == k) for k in ("fused", "unfused"))
        print(f"{m}: fused / unfused tokens/s x{f['tok_s_all'] / u['tok_s_all']:.3f} (aggregate), "
              f"x{f['tok_s_median'] / u['tok_s_median']:.3f} (median); TPF {u['tpf']:.2f} -> {f['tpf']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
