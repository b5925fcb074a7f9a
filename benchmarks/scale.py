#!/usr/bin/env python
"""dlmrt at real shapes, batch 1, against the memory roofline and its peers (issue 20 item 5).

Random-weight models of published shapes (Qwen3-0.6B / 1.7B / 4B, the SDAR shapes, dense; a
LLaDA2.0-mini-shaped MoE). Random weights have no confidence, so the tokens per forward are forced:
the topk rule with steps_per_block = L / k commits exactly k tokens per step (k = 1, 2, 4, 8), and
with the fused commit forward (default) a block costs L / k forwards, so TPF = k. No EOS can be
generated (the special ids sit beyond the "tokenizer" vocabulary, banned like padded rows), so every
answer runs its full length. Per row:

  tok/s      generated tokens / wall time from request start to last token (prefill included),
             median over repeats after warm-up (CUDA graphs are captured during warm-up)
  fwd/s      decode forwards per second (prefill excluded): 1 / ms_fwd
  ms_fwd     (wall - prefill) / forwards: one forward with everything the step does around it
  MB/fwd     bytes one forward must read: every weight it multiplies (the embedding table only when
             it is also the tied output head; quantized layers at their stored size, scales
             included; for the MoE every expert, because every expert runs: static shapes) plus
             the whole static KV cache (attention reads all its slots under a mask)
  roofline   (MB/fwd / bandwidth) / ms_fwd: the fraction of the memory roofline reached (1.0 =
             the forward costs only its weight and KV reads). Bandwidth: --bandwidth, by default
             4.8 TB/s (H200 datasheet) on CUDA and the measured copy bandwidth on a CPU. (Issue 20
             writes the ratio the other way up, achieved / ideal time; its targets, >= 0.7, are
             fractions of the roofline, which is what this column holds.)

Peers on the same shapes, same run: transformers' AR `generate` (Qwen3ForCausalLM, greedy, static
cache; on CUDA transformers compiles the decode step itself, torch.compile "reduce-overhead"; on a
CPU it runs uncompiled; TPF 1 by definition), the prefix-cache loop of orl/eval/peers.py (eager,
threshold rule, a host check every step; on random weights it commits about one token per step),
and every quantized form of orl.quant on the dlmrt rows (their kernel paths are printed: "emulated"
and "dequantize" paths are not native kernels; int8 and nvfp4 at --quant-tpf only, fp8 at every TPF).

Jobs run in priority order under --budget-s (what the issue's targets need first); a job that would
start after the budget is listed as skipped. --tiny shrinks every shape (2 layers, width 64) for a
quick run of the whole pipeline on a CPU (the test suite runs it); its roofline numbers mean nothing
(per-op overhead, not memory, sets the pace at that size).

    python benchmarks/scale.py --tiny                          # CPU plumbing check, seconds
    python benchmarks/scale.py --device cuda --json out.json   # the GPU table (benchmarks/gpu_check.sh)
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from orl.model import Transformer  # noqa: E402
from orl.quant import quantize  # noqa: E402
# helpers beside this script (its folder is on sys.path when it runs; the tests add it)
from scale_peers import dlmrt_rows, hf_rows, prefix_rows, row, sync  # noqa: E402
from scale_shapes import SHAPES, build, shape_args  # noqa: E402

H200_BANDWIDTH = 4.8e12


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="bfloat16 (default on CUDA) or float32 (default on a CPU)")
    p.add_argument("--shapes", default="qwen3-1.7b,qwen3-4b,llada2-mini,qwen3-0.6b")
    p.add_argument("--peers", default="dlmrt,hf,prefix", help="dlmrt, hf (transformers AR), prefix (prefix-cache loop)")
    p.add_argument("--forms", default="base,fp8,int8,nvfp4", help="base = the --dtype weights; then orl.quant kinds")
    p.add_argument("--tpf", default="1,2,4,8", help="forced tokens per forward of the dlmrt rows")
    p.add_argument("--moe-tpf", default="8,4", help="the MoE's TPF values (its every-expert forward is slow)")
    p.add_argument("--quant-tpf", default="4", help="TPF values of the int8 and nvfp4 rows (fp8 gets --tpf)")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--block-len", type=int, default=32)
    p.add_argument("--layers", type=int, default=0, help="override every shape's layer count (0: published)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--prefix-threshold", type=float, default=0.9)
    p.add_argument("--bandwidth", type=float, default=0.0, help="bytes/s for the roofline (0: see the docstring)")
    p.add_argument("--budget-s", type=float, default=1e9, help="start no job after this many seconds")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, short answers: the CPU plumbing check")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", help="write the rows here too")
    args = p.parse_args(argv)
    if args.tiny:
        args.new_tokens, args.prompt_len, args.block_len = min(args.new_tokens, 16), min(args.prompt_len, 16), 8
    args.tpf = [int(k) for k in args.tpf.split(",")]
    args.moe_tpf = [int(k) for k in args.moe_tpf.split(",")]
    args.quant_tpf = [int(k) for k in args.quant_tpf.split(",")]
    bad = [k for k in set(args.tpf + args.moe_tpf + args.quant_tpf) if k <= 0 or args.block_len % k]
    if bad or args.new_tokens % args.block_len:
        p.error(f"every TPF value must divide --block-len ({args.block_len}, got {sorted(bad)}), and the block "
                f"length must divide --new-tokens ({args.new_tokens})")
    if unknown := set(args.shapes.split(",")) - set(SHAPES):
        p.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    return args


def copy_bandwidth(device: torch.device) -> float:
    """Bytes read + written per second by a large device copy."""
    n = (1 << 28) if device.type == "cuda" else (1 << 25)  # float32 elements: 1 GiB / 128 MiB
    x, y = torch.ones(n, device=device), torch.empty(n, device=device)
    for _ in range(2):
        y.copy_(x)
    sync(device)
    t0, reps = time.perf_counter(), 5
    for _ in range(reps):
        y.copy_(x)
    sync(device)
    return 2 * 4 * n * reps / (time.perf_counter() - t0)


# ---------------------------------------------------------------- jobs, budget, table

def jobs(args) -> list[tuple[str, str, str]]:
    """(shape, peer, form) in priority order. The first two shapes carry the issue's targets (roofline
    of bf16, fp8 vs bf16, dlmrt vs compiled AR), so their jobs come first, pair by pair across both:
    bf16 dlmrt, fp8, the AR peer, the prefix-cache loop, int8, nvfp4; then every job of each further
    shape. A job rebuilds its random model when the shape changes (seconds on a GPU)."""
    peers, forms = args.peers.split(","), args.forms.split(",")
    order = [(p, f) for p, f in (("dlmrt", "base"), ("dlmrt", "fp8"), ("hf", "base"), ("prefix", "base"),
                                 ("dlmrt", "int8"), ("dlmrt", "nvfp4")) if p in peers and f in forms]
    shapes = args.shapes.split(",")
    first = [(s, p, f) for p, f in order for s in shapes[:2]]
    return first + [(s, p, f) for s in shapes[2:] for p, f in order]


def run(args, on_rows=None) -> tuple[list[dict], dict]:
    """on_rows(rows, meta): called after every job (the JSON is rewritten, so a run cut short by a
    timeout keeps what it measured)."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    measured_bw = copy_bandwidth(device)
    bw = args.bandwidth or (H200_BANDWIDTH if device.type == "cuda" else measured_bw)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "bandwidth": bw,
            "copy_bandwidth": measured_bw, "new_tokens": args.new_tokens, "prompt_len": args.prompt_len,
            "block_len": args.block_len, "repeats": args.repeats, "warmup": args.warmup, "tiny": args.tiny}
    rows: list[dict] = []
    base: Transformer | None = None
    current = None  # the shape of `base`
    for shape, peer, form in jobs(args):
        kw = shape_args(shape, args)
        if time.perf_counter() - start > args.budget_s:
            rows.append(row(shape, kw, peer, form, note=f"skipped: budget of {args.budget_s:.0f} s used"))
            continue
        t0 = time.perf_counter()
        try:
            if current != shape:  # one shape's models at a time
                base = None
                free(device)
                base, current = build(kw, dtype, device), shape
            prompt = torch.randint(0, kw["vocab_size"] - 3, (args.prompt_len,),
                                   generator=torch.Generator().manual_seed(1)).tolist()
            tpfs = args.moe_tpf if kw.get("n_experts") else args.tpf if form in ("base", "fp8") else args.quant_tpf
            if peer == "prefix" and kw.get("n_experts") and not args.tiny:
                new = [row(shape, kw, "prefix-cache", form, note="skipped: its eager every-expert forward "
                           "(~0.5 s on a GPU) x ~260 forwards per answer does not fit the budget")]
            elif peer == "hf":
                new = hf_rows(shape, kw, prompt, args, device, dtype, bw)
            elif peer == "prefix":
                new = prefix_rows(shape, kw, base, "base", prompt, args, device, bw)
            elif form == "base":
                new = dlmrt_rows(shape, kw, base, "base", prompt, args, device, bw, tpfs)
            else:
                model = quantize(copy.deepcopy(base), form)
                new = dlmrt_rows(shape, kw, model, form, prompt, args, device, bw, tpfs)
                del model
        except Exception as e:  # one failed job must not lose the table
            new = [row(shape, kw, peer, form, note=f"FAILED: {type(e).__name__}: {str(e)[:200]}")]
        for r in new:
            r["job_s"] = round(time.perf_counter() - t0, 1)
        rows.extend(new)
        print_rows(new, header=not any("tok_s" in r for r in rows[: len(rows) - len(new)]))
        if on_rows is not None:
            on_rows(rows, {**meta, "total_s": time.perf_counter() - start})
        if peer == "hf":
            free(device, dynamo=True)
    meta["total_s"] = time.perf_counter() - start
    return rows, meta


def free(device: torch.device, dynamo: bool = False) -> None:
    if dynamo:
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def print_rows(rows: list[dict], header: bool = False) -> None:
    if header:
        print(f"{'shape':12} {'L#':>3} {'peer':15} {'form':6} {'TPF':>5} {'tok/s':>8} {'fwd/s':>7} {'ms/fwd':>7} "
              f"{'MB/fwd':>8} {'roofline':>8}  paths / note")
    for r in rows:
        if "tok_s" not in r:
            print(f"{r['shape']:12} {r['layers']:>3} {r['peer']:15} {r['form']:6} {r.get('note', '')}")
            continue
        print(f"{r['shape']:12} {r['layers']:>3} {r['peer']:15} {r['form']:6} {r['tpf']:5.2f} {r['tok_s']:8.1f} "
              f"{r['fwd_s']:7.1f} {r['ms_fwd']:7.2f} {r['mb_fwd']:8.1f} {r['roofline']:8.3f}  {r.get('paths', '')}",
              flush=True)


def main(argv=None) -> None:
    args = parse_args(argv)
    print(f"scale: {args.device}, new tokens {args.new_tokens}, prompt {args.prompt_len}, block {args.block_len}, "
          f"batch 1, medians of {args.repeats} after {args.warmup} warm-up{' (TINY shapes)' if args.tiny else ''}",
          flush=True)
    def write(rows, meta):
        if args.json:
            Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))

    rows, meta = run(args, write)
    write(rows, meta)
    print(f"bandwidth for the roofline {meta['bandwidth'] / 1e9:.0f} GB/s (measured copy {meta['copy_bandwidth'] / 1e9:.0f} "
          f"GB/s); dtype {meta['dtype']}; {meta['total_s']:.0f} s")


if __name__ == "__main__":
    main()
