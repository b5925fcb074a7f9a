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

from orl.device import resolve_device  # noqa: E402
from orl.model.vocab import special_ids  # noqa: E402
from orl.presets import get_preset  # noqa: E402
from orl.train import convert as cv  # noqa: E402
from orl.train.corpus import read_corpus, windows  # noqa: E402
from orl.train.dist import Dist  # noqa: E402
from orl.train.loop import make_optimizer  # noqa: E402


def cpu_s() -> float:
    """This process's CPU seconds: on a shared, oversubscribed machine the wall time of one thread is
    mostly waiting; the CPU time is what the step costs."""
    return time.process_time()


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def profile_step(step, device: torch.device, n: int) -> dict:
    """One step under torch.profiler: its n most costly entries by self time. On a GPU these are the kernels
    (an aten op's self device time is its kernels' again, and user ranges such as the optimizer step span
    them: summing all of them would count the work twice); on the CPU, the ops. self_total_ms is the sum over
    all such entries: against the unprofiled s_per_step it says how busy the device is (the profiled step's
    own wall time carries the profiler's overhead). A probe's s_per_step alone does not say whether attention,
    the vocabulary head, the optimizer or launch gaps hold a step back."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        step()
    wall = time.perf_counter() - t
    key = "self_device_time_total" if gpu else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if not getattr(e, "is_user_annotation", False) and getattr(e, key, 0) > 0]
    kernels = [e for e in events if e.device_type == DeviceType.CUDA] if gpu else events
    ops = kernels or events  # a profiler that files kernels otherwise: every entry (then counted twice)
    total = sum(getattr(e, key) for e in ops)
    top = sorted(ops, key=lambda e: getattr(e, key), reverse=True)[:n]
    return {"clock": "device" if gpu else "cpu", "kernels_only": bool(kernels) if gpu else None,
            "wall_s": round(wall, 3), "self_total_ms": round(total / 1e3, 2),
            "top": [{"op": e.key[:120], "calls": e.count, "self_ms": round(getattr(e, key) / 1e3, 2),
                     "frac": round(getattr(e, key) / max(total, 1e-9), 3)} for e in top]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--preset", default="gemma_convert")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (CPU-second columns only on cpu)")
    ap.add_argument("--corpus", help="a corpus directory: time the run's own steps (its micro-batches, batch "
                                     "building included); default: rows of torch's sources, one micro-batch")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed steps, one more under torch.profiler: a line with its N most costly ops "
                         "(self device time on a GPU, self CPU time on the CPU), before the summary")
    args = ap.parse_args()
    from orl.overrides import apply_overrides

    torch.set_num_threads(args.threads)
    cfg = apply_overrides(replace(get_preset("convert", args.preset), base=args.base), args.set)
    dist = Dist(device=resolve_device(args.device))
    t = time.perf_counter()
    teacher, tok, _, _ = cv.load_base(cfg, dist.device)
    load_s = time.perf_counter() - t
    if cfg.draft_only:  # the base, frozen, on the clean rows and a trained drafter on the rest, as the run builds it
        model = cv.draft_only_model(cfg, teacher, None, dist.device).train()
    else:
        model = cv.to_diffusion(teacher).train()
        if cfg.freeze_embeddings:
            model.model.embed_tokens.weight.requires_grad_(False)
    if cfg.checkpointing:
        cv.checkpoint_blocks(model)
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay)
    ids = special_ids(tok, model.args.vocab_size)
    if args.corpus:  # the run's own steps: its micro-batches per stream, batch building included
        streams, bos = read_corpus(Path(args.corpus)), getattr(tok, "bos_id", None)

        def batches_at(step: int) -> list:
            return cv.step_batches(cfg, streams, ids, step, bos, model)  # draft_target ar: its forward included
    else:  # code rows from torch's own sources, one micro-batch (no corpus needed)
        stream = torch.tensor(sum((tok.encode(p.read_text()) for p in
                                   sorted(Path(torch.__file__).parent.glob("*.py"))[:40]), []), dtype=torch.int32)

        def batches_at(step: int) -> list:
            gen = torch.Generator().manual_seed(step)
            w = windows(stream, cfg.rows_per_step, cfg.window, gen)
            return [cv.diffusion_batch(cv.row_pairs(w, cfg.context), cfg.block_len, ids, gen, cfg.noisy_copies,
                                       eos=False)]
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
    rows, on_cpu = cfg.rows_per_step, dist.device.type == "cpu"
    print(json.dumps({"load_s": round(load_s, 1), "threads": args.threads, "rows": rows, "mix": list(cfg.mix),
                      "warmup": cfg.warmup, "eval_every": cfg.eval_every, "save_every": cfg.save_every,
                      "window": cfg.window,
                      "block_len": cfg.block_len, "checkpointing": cfg.checkpointing, "bf16": cfg.bf16,
                      "freeze_embeddings": cfg.freeze_embeddings, "ce_chunk": cfg.ce_chunk,
                      "draft_only": cfg.draft_only, "trained_params": sum(p.numel() for p in model.parameters()
                                                                          if p.requires_grad),
                      "batches": "the run's (--corpus)" if args.corpus else "one of torch's sources"}), flush=True)
    steps = []
    for step in range(args.steps):
        timers.update(head=0.0, opt=0.0)
        t0, c0 = time.perf_counter(), cpu_s()
        batches = batches_at(step)
        loss, norm = cv.train_step(model, opt, batches, cfg, cfg.lr, dist)  # returns floats: synced
        total, cpu = time.perf_counter() - t0, cpu_s() - c0
        raw = {"total_s": total, "cpu_s": cpu, "head": timers["head"], "opt": timers["opt"],
               "window_tokens": rows * cfg.window, "masked": sum(int((b.weight > 0).sum()) for b in batches)}
        steps.append(raw)
        rec = {"step": step, "loss": round(loss, 4), "total_s": round(total, 3), "row_tokens":
               sum(b.tokens.numel() for b in batches), "window_tokens": raw["window_tokens"], "masked": raw["masked"],
               "max_rss_gib": round(rss_gib(), 2)}
        if on_cpu:  # on a GPU these are host seconds, not the step's cost
            rec.update(cpu_s=round(cpu, 2), head_cpu_s=round(timers["head"], 2), opt_cpu_s=round(timers["opt"], 2),
                       body_cpu_s=round(cpu - timers["head"] - timers["opt"], 2))
        print(json.dumps(rec), flush=True)
    if args.profile:
        try:
            out = {"profile": profile_step(lambda: cv.train_step(model, opt, batches_at(args.steps), cfg, cfg.lr, dist),
                                           dist.device, args.profile)}
        except Exception as e:  # noqa: BLE001 - the probe's timings stand without it
            out = {"profile_error": f"{type(e).__name__}: {e}"[:500]}
        print(json.dumps(out), flush=True)
    steady = steps[1:] or steps  # the first step pays for allocation and autotuning
    tot, cpu = sum(r["total_s"] for r in steady), sum(r["cpu_s"] for r in steady)
    summary = {"steps": len(steady), "s_per_step": tot / len(steady),
               "window_tok_s": round(sum(r["window_tokens"] for r in steady) / tot, 1),
               "masked_pos_s": round(sum(r["masked"] for r in steady) / tot, 1), "device": str(dist.device),
               "max_rss_gib": round(rss_gib(), 2)}
    if on_cpu:
        summary.update(cpu_s_per_step=round(cpu / len(steady), 2),
                       window_tok_per_cpu_s=round(sum(r["window_tokens"] for r in steady) / max(cpu, 1e-9), 1),
                       **{f"{k}_cpu_frac": round(sum(r[k] for r in steady) / max(cpu, 1e-9), 3) for k in ("head", "opt")},
                       body_cpu_frac=round(1 - sum(r["head"] + r["opt"] for r in steady) / max(cpu, 1e-9), 3))
    else:
        summary["max_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        summary["gpu_total_gib"] = round(torch.cuda.get_device_properties(dist.device).total_memory / 2**30, 2)
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
