"""Where a convert-recipe training step spends its time and memory (issue 22: profile first).

    python benchmarks/convert_profile.py --base ~/.cache/orl/gemma-3-270m --steps 3 --threads 1

Runs `steps` optimizer steps of the recipe (orl.train.convert.train_step, the same batches as a run of
the preset) on the real checkpoint and splits each step's wall time into the head (chunked CE with
its gradients, timed around chunked_ce_sum), the optimizer step, and the body (the rest: embedding,
blocks forward + backward, batch building excluded), in CPU seconds of this process (with one thread on
a shared machine the wall time is mostly waiting for a core; both are printed). Prints one JSON line per step and a summary:
tokens/s counted as row tokens (what the run's tokens_seen counts) and masked (loss) positions/s.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.model.vocab import special_ids  # noqa: E402
from orl.presets import get_preset  # noqa: E402
from orl.train import convert as cv  # noqa: E402
from orl.train.corpus import windows  # noqa: E402
from orl.train.loop import make_optimizer  # noqa: E402


def cpu_s() -> float:
    """This process's CPU seconds: on a shared, oversubscribed machine the wall time of one thread is
    mostly waiting; the CPU time is what the step costs."""
    return time.process_time()


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--preset", default="gemma_convert")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (on cuda the *_cpu_s columns are host time only)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    args = ap.parse_args()
    from orl.overrides import apply_overrides

    torch.set_num_threads(args.threads)
    cfg = apply_overrides(replace(get_preset("convert", args.preset), base=args.base), args.set)
    t = time.perf_counter()
    from orl.device import resolve_device
    from orl.train.dist import Dist

    dist = Dist(device=resolve_device(args.device))
    teacher, tok, _, _ = cv.load_base(cfg, dist.device)
    load_s = time.perf_counter() - t
    # code rows only (the corpus build and its distillation are timed by the run itself)
    stream = torch.tensor(sum((tok.encode(p.read_text()) for p in sorted(Path(torch.__file__).parent.glob("*.py"))[:40]), []),
                          dtype=torch.int32)
    model = cv.to_diffusion(teacher).train()
    if cfg.freeze_embeddings:
        model.model.embed_tokens.weight.requires_grad_(False)
    if cfg.checkpointing:
        cv.checkpoint_blocks(model)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay)
    ids = special_ids(tok, model.args.vocab_size)
    timers = {"head": 0.0, "opt": 0.0}

    def timed(name, fn):
        def run(*a, **k):
            t0 = cpu_s()
            out = fn(*a, **k)
            timers[name] += cpu_s() - t0
            return out
        return run

    cv.chunked_ce_sum = timed("head", cv.chunked_ce_sum)
    opt.step = timed("opt", opt.step)
    rows = cfg.rows_per_step
    print(json.dumps({"load_s": round(load_s, 1), "threads": args.threads, "rows": rows, "window": cfg.window,
                      "block_len": cfg.block_len, "checkpointing": cfg.checkpointing, "bf16": cfg.bf16,
                      "freeze_embeddings": cfg.freeze_embeddings, "ce_chunk": cfg.ce_chunk}), flush=True)
    summary = []
    for step in range(args.steps):
        gen = torch.Generator().manual_seed(step)
        w = windows(stream, rows, cfg.window, gen)
        batch = cv.diffusion_batch(cv.row_pairs(w, cfg.context), cfg.block_len, ids, gen, cfg.noisy_copies, eos=False)
        timers.update(head=0.0, opt=0.0)
        t0, c0 = time.perf_counter(), cpu_s()
        loss, norm = cv.train_step(model, opt, [batch], cfg, cfg.lr, dist)  # returns floats: synced
        total, cpu = time.perf_counter() - t0, cpu_s() - c0
        rec = {"step": step, "loss": round(loss, 4), "total_s": round(total, 2), "cpu_s": round(cpu, 2), "head_cpu_s": round(timers["head"], 2),
               "opt_cpu_s": round(timers["opt"], 2), "body_cpu_s": round(cpu - timers["head"] - timers["opt"], 2),
               "row_tokens": batch.tokens.numel(), "window_tokens": rows * cfg.window,
               "masked": int((batch.weight > 0).sum()), "max_rss_gib": round(rss_gib(), 2)}
        summary.append(rec)
        print(json.dumps(rec), flush=True)
    steady = summary[1:] or summary
    tot = sum(r["total_s"] for r in steady)
    print(json.dumps({"summary": {
        "steps": len(steady), "s_per_step": round(tot / len(steady), 2),
        "cpu_s_per_step": round(sum(r["cpu_s"] for r in steady) / len(steady), 2),
        "window_tok_per_cpu_s": round(sum(r["window_tokens"] for r in steady) / sum(r["cpu_s"] for r in steady), 1),
        "window_tok_s": round(sum(r["window_tokens"] for r in steady) / tot, 1),
        "masked_pos_s": round(sum(r["masked"] for r in steady) / tot, 1), "device": str(dist.device),
        "max_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if dist.device.type == "cuda" else None,
        **{f"{k}_cpu_frac": round(sum(r[f"{k}_cpu_s"] for r in steady) / sum(r["cpu_s"] for r in steady), 3)
           for k in ("head", "opt", "body")}, "max_rss_gib": round(rss_gib(), 2)}}))


if __name__ == "__main__":
    main()
