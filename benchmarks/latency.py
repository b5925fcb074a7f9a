#!/usr/bin/env python
"""dlmrt latency at batch 1, side by side with two plain loops (orl/eval/peers.py):
(a) a LLaDA-reference-style loop (full recompute every step, fixed schedule) and (b) a Fast-dLLM
style prefix-cache loop (cache refreshed once per block, threshold rule, host check every step).

Prints one table. Per decoder: tokens, tokens/s (median over repeats, after warm-up), TPF, forwards,
prefill and median wall time (DESIGN section 5 definitions), and for the engine the overhead ratio

    wall / (forwards x pure forward time)

where the pure forward time is the median time of one bare block forward: the exact model call a
denoising step makes (captured from the engine's own block_forward, same shapes), timed alone in the
same mode (eager, torch.compile, or replayed as a CUDA graph). 1.0 would mean the loop costs nothing
beyond its forwards; prefill, mask building, the commit rule and host checks all push it up.

Timing discipline for noisy machines: every decoder and every bare-forward measurement runs once per
round, rounds interleaved, so ratios compare numbers taken in the same time window; medians over
rounds; warm-up (including torch.compile and CUDA-graph capture) before the first round.

    python benchmarks/latency.py                                   # random tiny-shape model, CPU
    python benchmarks/latency.py --model runs/tiny-base --gen-len 64 --block-len 16
    python benchmarks/latency.py --device cuda --modes eager,compile,cuda_graph,cuda_graph:4
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))             # `orl` without an install (the GPU box runs from the repo)

import torch  # noqa: E402

from orl.engine import DecodeConfig, Engine  # noqa: E402
from orl.eval.peers import llada_reference, prefix_cache  # noqa: E402
from orl.model import ModelArgs, Transformer  # noqa: E402
from orl.tokenizer import CharTokenizer  # noqa: E402
# helpers beside this script (its folder is on sys.path when it runs)
from latency_timers import Decoder, Run, bare_forward, engine_run  # noqa: E402

DEFAULT_PROMPT = "Sort the numbers 41 7 19 3 and explain each step:"
# the tiny preset's shape, with room for a 256-token answer
RANDOM_ARGS = ModelArgs(vocab_size=128, dim=192, n_layers=6, n_heads=6, n_kv_heads=2, head_dim=32,
                        ffn_dim=512, max_seq_len=512)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="checkpoint directory (default: a random model of the tiny preset's shape)")
    p.add_argument("--gen-len", type=int, default=256, help="answer tokens (max_new_tokens)")
    p.add_argument("--block-len", type=int, default=32)
    p.add_argument("--threshold", type=float, default=0.9, help="commit threshold of dlmrt and loop (b)")
    p.add_argument("--ref-steps", type=int, default=0,
                   help="steps of loop (a), split evenly per block (default: gen-len, one token per step)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (median over them)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (compile/capture happen here)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--modes", default="eager,compile",
                   help="dlmrt modes, comma separated: eager, compile, cuda_graph; 'mode:k' runs k steps "
                        "per host check (DecodeConfig.chunk_steps, default 1)")
    p.add_argument("--no-baselines", action="store_true", help="skip loops (a) and (b)")
    p.add_argument("--max-len", type=int, default=0,
                   help="engine KV-cache slots (default: prompt + answer, the tightest that fits)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (0: torch's default). 1 by default: batch-1 ops are too small to "
                        "split, and on a shared machine a preempted worker stalls every op at its barrier "
                        "(measured ~10x slower with 2 threads next to a training run on 2 cores)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--seed", type=int, default=0, help="random model init")
    p.add_argument("--json", help="also write the rows as JSON to this file")
    return p.parse_args(argv)


def random_model(seed: int) -> Transformer:
    """GPT-2-style init (Transformer's own). Its logits are nearly uniform, so at tau = 0.9 every step
    commits exactly one token: the most steps per token, the hardest case for per-step overhead. The
    EOS embedding row is zeroed (tied head: EOS logit exactly 0, below the max of the other ~127
    random logits) so the model never stops early and every decoder generates all gen-len tokens."""
    torch.manual_seed(seed)
    model = Transformer(RANDOM_ARGS)
    with torch.no_grad():
        model.model.embed_tokens.weight[CharTokenizer().eos_id].zero_()
    return model.eval()


def parse_mode(spec: str) -> tuple[str, int]:
    name, _, k = spec.partition(":")
    if name not in ("eager", "compile", "cuda_graph"):
        raise SystemExit(f"unknown mode {name!r}; expected eager, compile or cuda_graph (optionally ':k')")
    return name, int(k or 1)


def decode_config(args, mode: str, chunk: int) -> DecodeConfig:
    return DecodeConfig(block_len=args.block_len, max_new_tokens=args.gen_len, rule="threshold",
                        threshold=args.threshold, chunk_steps=chunk, compile=mode == "compile",
                        cuda_graph=mode == "cuda_graph")


# ---------------------------------------------------------------- report

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarise(d: Decoder) -> dict:
    toks = d.runs[0].token_ids
    n = len(toks)
    wall = med([r.total_s for r in d.runs])
    row = dict(decoder=d.name, tokens=n, forwards=d.runs[0].forwards,
               tpf=n / max(d.runs[0].forwards, 1),
               tok_s=med([len(r.token_ids) / r.total_s for r in d.runs]),
               prefill_ms=med([r.prefill_s for r in d.runs]) * 1e3, wall_ms=wall * 1e3,
               fwd_ms=None, overhead=None, token_ids=toks)
    if d.bare_s:
        fwd = med(d.bare_s)
        row["fwd_ms"] = fwd * 1e3
        row["overhead"] = wall / (d.runs[0].forwards * fwd)
    return row


def fmt_table(rows: list[dict]) -> str:
    head = ["decoder", "tokens", "tok/s (batch 1)", "TPF", "forwards", "prefill ms", "wall ms", "fwd ms", "overhead"]
    body = []
    for r in rows:
        body.append([r["decoder"], str(r["tokens"]), f"{r['tok_s']:.1f}", f"{r['tpf']:.2f}", str(r["forwards"]),
                     f"{r['prefill_ms']:.1f}" if r["prefill_ms"] else "-", f"{r['wall_ms']:.0f}",
                     f"{r['fwd_ms']:.3f}" if r["fwd_ms"] is not None else "-",
                     f"{r['overhead']:.2f}" if r["overhead"] is not None else "-"])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                          for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([line(head), sep] + [line(b) for b in body])


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch sees no CUDA device")
    if args.threads and device.type == "cpu":
        torch.set_num_threads(args.threads)
    modes = [parse_mode(m) for m in args.modes.split(",") if m]
    if device.type != "cuda" and any(m == "cuda_graph" for m, _ in modes):
        raise SystemExit("mode cuda_graph needs --device cuda")
    dtype = getattr(torch, args.dtype)

    if args.model:
        from orl.checkpoint import load_checkpoint  # needs safetensors; only for real checkpoints
        model, tok, _ = load_checkpoint(args.model, device=device, dtype=dtype)
        model_desc = f"checkpoint {args.model}"
    else:
        model, tok = random_model(args.seed).to(device=device, dtype=dtype), CharTokenizer()
        model_desc = f"random model (tiny preset shape, max_seq_len {RANDOM_ARGS.max_seq_len}, seed {args.seed})"
    model.eval()
    prompt_ids = tok.encode(args.prompt)
    P, L = len(prompt_ids), args.block_len
    n_blocks = -(-args.gen_len // L)
    max_len = args.max_len or P + n_blocks * L
    ids = Engine(model, tok, max_len=max_len).ids  # the banned ids the engine uses: the loops ban the same

    decoders: list[Decoder] = []
    for mode, chunk in modes:
        cfg = decode_config(args, mode, chunk)
        label = mode + (f":{chunk}" if chunk != 1 else "")
        decoders.append(Decoder(f"dlmrt {label}", engine_run(Engine(model, tok, max_len=max_len), prompt_ids, cfg),
                                mode=label))
    if not args.no_baselines:
        common = dict(gen_len=args.gen_len, block_len=L, mask_id=tok.mask_id, eos_id=tok.eos_id, banned=ids.banned)
        ref_steps = args.ref_steps or args.gen_len

        def run_a() -> Run:
            r = llada_reference(model, prompt_ids, steps=ref_steps, **common)
            return Run(r.token_ids, r.forwards, r.prefill_s, r.total_s)

        def run_b() -> Run:
            r = prefix_cache(model, prompt_ids, threshold=args.threshold, **common)
            return Run(r.token_ids, r.forwards, r.prefill_s, r.total_s)

        decoders.append(Decoder(f"(a) LLaDA-ref, {ref_steps} steps", run_a))
        decoders.append(Decoder(f"(b) prefix-cache, tau {args.threshold}", run_b))

    # bare-forward timers first (they hook the model once to capture the step's call: done before any
    # compiled step exists, so no compiled code ever sees the hook), then warm-up rounds: torch.compile,
    # CUDA-graph capture and first-call costs all happen here, untimed
    t_warm = time.perf_counter()
    for d in decoders:
        if d.mode is not None:
            mode, chunk = parse_mode(d.mode)
            d.bare = bare_forward(model, tok, prompt_ids, decode_config(args, mode, chunk), max_len, mode, device)
    for _ in range(args.warmup):
        for d in decoders:
            d.run()
    warm_s = time.perf_counter() - t_warm

    t_timed = time.perf_counter()
    for _ in range(args.repeats):  # rounds: every decoder once, then every bare-forward timer once
        for d in decoders:
            d.runs.append(d.run())
        for d in decoders:
            if d.bare is not None:
                d.bare_s.append(d.bare())
    timed_s = time.perf_counter() - t_timed

    rows = [summarise(d) for d in decoders]
    by = {r["decoder"]: r for r in rows}
    print(f"# dlmrt latency: {model_desc}, {args.dtype}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else
             f" ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"))
    print(f"# torch {torch.__version__}; batch 1; prompt {P} tokens; gen-len {args.gen_len}; block-len {L}; "
          f"threshold {args.threshold}; engine cache {max_len} slots; {args.repeats} rounds after "
          f"{args.warmup} warm-up ({warm_s:.0f} s warm-up incl. compile, {timed_s:.0f} s timed)")
    print(fmt_table(rows))
    print("# tok/s: median over rounds of tokens / wall; wall: request start -> last token (prefill included);")
    print("# fwd ms: median bare block forward, same mode; overhead = wall / (forwards x fwd ms)")
    print("# TPF = tokens up to and including EOS / forwards (denoising steps + the forwards between blocks: "
          "dlmrt's commit unless fused into the next block's first step (the default), (b)'s cache refresh; "
          "prefill excluded)")
    if low := [r["decoder"] for r in rows if r["tpf"] < 1]:
        print(f"# TPF < 1 ({', '.join(low)}): forwards that yield no counted token count too: the forwards "
              "between blocks, and the loops' steps on the positions after EOS in its block (dlmrt fills them "
              "with EOS at once), so about one token per step ends below 1")

    engine_rows = [r for r in rows if r["decoder"].startswith("dlmrt")]
    a = next((r for r in rows if r["decoder"].startswith("(a)")), None)
    b = next((r for r in rows if r["decoder"].startswith("(b)")), None)
    for r in engine_rows:
        parts = []
        if a:
            parts.append(f"{r['tok_s'] / a['tok_s']:.2f}x over (a)")
        if b:
            parts.append(f"{r['tok_s'] / b['tok_s']:.2f}x over (b)")
        print(f"# {r['decoder']}: " + ", ".join(parts + [f"overhead {r['overhead']:.2f}"]))
    if "dlmrt eager" in by and "dlmrt compile" in by:
        e, c = by["dlmrt eager"], by["dlmrt compile"]
        print(f"# compile vs eager: tokens/s x{c['tok_s'] / e['tok_s']:.2f}, "
              f"bare forward x{e['fwd_ms'] / c['fwd_ms']:.2f} faster ({'compile' if c['tok_s'] > e['tok_s'] else 'eager'} "
              f"measures faster end to end)")
    base = rows[0]
    for r in rows[1:]:  # sanity: same model, same semantics -> normally the same tokens
        i = first_difference(base["token_ids"], r["token_ids"])
        print(f"# tokens of {r['decoder']} vs {base['decoder']}: "
              + ("identical" if i is None else f"differ from position {i}"))

    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = dict(model=model_desc, device=str(device), dtype=args.dtype, torch=torch.__version__,
                    gen_len=args.gen_len, block_len=L, threshold=args.threshold, repeats=args.repeats,
                    prompt_tokens=P, max_len=max_len, threads=torch.get_num_threads(), time=time.time(),
                    host=os.uname().nodename)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
