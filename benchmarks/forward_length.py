#!/usr/bin/env python
"""What a longer forward costs at batch 1: the question behind the fused self-draft (docs/ENGINE.md,
"Self-speculative decoding"). A two-forward self-speculative round runs two forwards of k + 1 positions
(draft, verify); a fused round runs one of (k + 1) + (2k + 1) k positions. With TPFs measured on the same
outputs (orl eval records), fused is faster in tokens/s exactly when

    (TPF_fused / TPF_two) * t(k + 1) / t(fused length)  >  1,

which this script prints for the forward times it measures. Each row: one cached forward of T positions
over a KV cache of --context slots (attention over all of them, as the AR decoder's static cache), eager,
median of --repeats after warm-up. Random weights at published shapes (benchmarks/scale_shapes.py) or a
checkpoint (--model).

    python benchmarks/forward_length.py --model checkpoints/orl-tiny-base           # CPU, seconds
    python benchmarks/forward_length.py --shape qwen3-4b --device cuda --dtype bfloat16
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from scale_shapes import SHAPES, TINY, build  # noqa: E402


def fused_len(k: int) -> int:
    return (k + 1) + (2 * k + 1) * k


def time_forward(model, T: int, context: int, repeats: int, device: torch.device) -> float:
    """Median seconds of one forward of T new positions after context - T cached ones."""
    cache = model.new_cache(1, context)
    slots = torch.arange(context - T, context, device=device)
    keys = torch.arange(context, device=device)
    mask = (keys[None, None] <= slots[None, :, None])                          # [1, T, S] causal
    tokens = torch.randint(0, 100, (1, T), device=device)
    times = []
    with torch.no_grad():
        for i in range(repeats + 2):  # two warm-ups
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(tokens, slots[None], mask, cache=cache, slots=slots)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= 2:
                times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a checkpoint directory (default: random weights at --shape)")
    p.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    p.add_argument("--layers", type=int, help="fewer layers than the shape's (a quick run)")
    p.add_argument("--tiny", action="store_true", help="the shape shrunk to 2 layers of width 64 (a plumbing check)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--context", type=int, default=512, help="KV cache slots attended over")
    p.add_argument("--k", type=int, default=8, help="draft length: rows for k + 1 and the fused length")
    p.add_argument("--tpf", nargs=2, type=float, metavar=("TWO", "FUSED"), default=(2.39, 3.11),
                   help="measured TPFs of the two-forward and fused decoders (default: hint4g2, long7xp in range)")
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args(argv)
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    if a.model:
        from orl.checkpoint import load_checkpoint

        model = load_checkpoint(a.model, device=a.device, dtype=dtype)[0].eval()
        name = Path(a.model).name
    else:
        kw = dict(SHAPES[a.shape], max_seq_len=a.context, **(TINY if a.tiny else {}))
        if a.layers:
            kw["n_layers"] = a.layers
        model = build(kw, dtype, device)
        name = a.shape + (" (tiny)" if a.tiny else "") + (f" ({a.layers} layers)" if a.layers else "")
    lengths = sorted({1, a.k + 1, 2 * (a.k + 1), 4 * (a.k + 1), fused_len(a.k)})
    if max(lengths) > a.context:
        p.error(f"--context {a.context} is shorter than the fused forward ({fused_len(a.k)} positions)")
    rows = [{"T": T, "ms": 1e3 * time_forward(model, T, a.context, a.repeats, device)} for T in lengths]
    base = next(r["ms"] for r in rows if r["T"] == a.k + 1)
    print(f"{name} on {a.device} ({a.dtype}, {torch.get_num_threads()} threads), context {a.context}, "
          f"median of {a.repeats}")
    print(f"{'T':>6} {'ms/forward':>11} {'vs T=k+1':>9}")
    for r in rows:
        r["vs"] = r["ms"] / base
        print(f"{r['T']:>6} {r['ms']:>11.3f} {r['vs']:>9.2f}")
    two, fused = a.tpf
    ratio = fused / two * base / rows[-1]["ms"]
    print(f"fused vs two-forward self-speculative tokens/s at TPF {two} / {fused}, k = {a.k}: x{ratio:.2f} "
          f"(= {fused / two:.2f} TPF ratio x t({a.k + 1}) / t({fused_len(a.k)}))")
    return rows


if __name__ == "__main__":
    main()
