"""The vocabulary head's two CPU products side by side (orl.model.head): ms per call of F.linear(h, W) (h W^T)
and W h^T for 1-16 rows of a [V, D] head, one thread, median of repeats. `python benchmarks/head_kernel.py
[--vocab 262144 --dim 640 --dtype float32]` (gemma-3-270m's head by default)."""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def ms(f, repeats: int) -> float:
    f()  # warm-up
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[repeats // 2] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=262_144)
    ap.add_argument("--dim", type=int, default=640)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    w = (torch.randn(args.vocab, args.dim) * args.dim ** -0.5).to(dtype)
    print(f"| rows | h W^T (F.linear) ms | W h^T ms | ratio |  (V = {args.vocab}, D = {args.dim}, "
          f"{args.dtype}, {args.threads} thread(s))\n|---:|---:|---:|---:|")
    for rows in (1, 2, 3, 4, 5, 6, 8, 10, 16):
        h = torch.randn(rows, args.dim, dtype=dtype)
        a = ms(lambda: F.linear(h, w), args.repeats)
        b = ms(lambda: (w @ h.T).T.contiguous(), args.repeats)
        print(f"| {rows} | {a:.1f} | {b:.1f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
