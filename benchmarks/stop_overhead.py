"""Host cost of stop strings (orl/engine/stops.py): the same decode with and without a stop string that
never matches, so every check runs and none ends a row.

    OMP_NUM_THREADS=1 python benchmarks/stop_overhead.py --tokens 1024 --batch 8 --repeats 5

AR decoder (tiny random model, EOS disabled so every row runs to --tokens) at chunk_steps 1 (a check
after every step: the worst case) and 8 (the default), and the block engine (a check per block).
Prints the median wall seconds of --repeats runs after one warm-up, and the ratio with / without.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from orl.engine import DecodeConfig, Engine  # noqa: E402
from orl.engine.ar import ARConfig, ARDecoder  # noqa: E402
from orl.tokenizer import CharTokenizer  # noqa: E402
from reference_decoder import random_model  # noqa: E402
from test_ar import tiny_ar  # noqa: E402

NEVER = ("@@never@@",)


def median_s(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = CharTokenizer()
    prompts = ["the quick brown fox"] * args.batch
    ar = ARDecoder(tiny_ar(max_seq_len=2 * args.tokens), tok)
    ar.eos_id, ar.eos_ids = -1, (-1,)  # no token ends a row: every row runs to --tokens
    engine = Engine(random_model(vocab_size=tok.vocab_size, eos_bias=-1e4, max_seq_len=2 * args.tokens), tok)
    cases = [(f"AR chunk_steps {c}", lambda stop, c=c: ar.generate(prompts, ARConfig(
                max_new_tokens=args.tokens, chunk_steps=c, stop=stop))) for c in (1, 8)]
    cases.append(("block engine, block 4", lambda stop: engine.generate(prompts, DecodeConfig(
        block_len=4, max_new_tokens=args.tokens, threshold=0.5, stop=stop))))
    print(f"| decoder | no stop (s) | never-matching stop (s) | ratio |  ({args.batch} rows x {args.tokens} tokens, "
          f"median of {args.repeats})")
    print("|---|---:|---:|---:|")
    for name, run in cases:
        plain, stopped = median_s(lambda: run(()), args.repeats), median_s(lambda: run(NEVER), args.repeats)
        print(f"| {name} | {plain:.2f} | {stopped:.2f} | {stopped / plain:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
