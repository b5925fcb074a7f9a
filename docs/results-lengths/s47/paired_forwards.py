#!/usr/bin/env python
"""Two `orl eval` record files whose outputs are identical (same_outputs.py): per split, the pooled TPF of each,
their ratio with a paired bootstrap interval over prompts (2,000 resamples), and an exact two-sided sign test on
the prompts whose forward counts differ.
    python docs/results-lengths/s47/paired_forwards.py A.jsonl[.gz] B.jsonl[.gz]     (ratio = A's TPF / B's)"""
import gzip
import json
import math
import random
import sys


def read(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return {(r["split"], r["prompt_id"], r["sample"]): (r["n_tokens"], sum(r["forwards"].get(k, 0) for k in
                                                                                 ("step", "commit")))
                for r in map(json.loads, f)}


def sign_p(k, n):
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n) if n else 1.0


a, b = read(sys.argv[1]), read(sys.argv[2])
rng = random.Random(0)
for split in sorted({k[0] for k in a}):
    keys = sorted(k for k in a.keys() & b.keys() if k[0] == split)
    ta = sum(a[k][0] for k in keys) / sum(a[k][1] for k in keys)
    tb = sum(b[k][0] for k in keys) / sum(b[k][1] for k in keys)
    ratios = []
    for _ in range(2000):
        s = [keys[rng.randrange(len(keys))] for _ in keys]
        ratios.append((sum(a[k][0] for k in s) / sum(a[k][1] for k in s)) / (sum(b[k][0] for k in s) / sum(b[k][1] for k in s)))
    ratios.sort()
    fewer = sum(a[k][1] < b[k][1] for k in keys)
    more = sum(a[k][1] > b[k][1] for k in keys)
    print(f"{split}: {len(keys)} prompts, TPF {ta:.3f} vs {tb:.3f}, x{ta / tb:.3f} (95% {ratios[50]:.3f}-{ratios[1949]:.3f}); "
          f"fewer forwards on {fewer}, more on {more} (sign test p = {sign_p(fewer, fewer + more):.2g})")
