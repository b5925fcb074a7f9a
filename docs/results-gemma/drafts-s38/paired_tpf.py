"""Two convert_eval results on the same free-running prompts, compared prompt by prompt: pooled TPF of each, the
prompts where B needs fewer / more forwards for the same tokens, an exact two-sided sign test, and a paired
bootstrap interval of B's pooled TPF over A's. `python paired_tpf.py A.json B.json`."""
import json
import random
import sys
from math import comb

a, b = (json.load(open(f))[0]["free_running"]["per_prompt"] for f in sys.argv[1:3])
assert len(a) == len(b) and all(x["tokens"] == y["tokens"] for x, y in zip(a, b)), "not the same prompts and tokens"
tok = sum(x["tokens"] for x in a)
fa, fb = sum(x["forwards"] for x in a), sum(x["forwards"] for x in b)
fewer = sum(y["forwards"] < x["forwards"] for x, y in zip(a, b))
more = sum(y["forwards"] > x["forwards"] for x, y in zip(a, b))
n = fewer + more
p = min(1.0, 2 * sum(comb(n, i) for i in range(min(fewer, more) + 1)) / 2 ** n) if n else 1.0
rng = random.Random(0)
ratios = []
for _ in range(10_000):
    idx = [rng.randrange(len(a)) for _ in a]
    ratios.append(sum(a[i]["forwards"] for i in idx) / sum(b[i]["forwards"] for i in idx))
ratios.sort()
print(f"{len(a)} prompts, {tok} tokens each side: A TPF {tok / fa:.3f} ({fa} forwards), B TPF {tok / fb:.3f} ({fb})")
print(f"B fewer forwards on {fewer} prompts, more on {more}, equal on {len(a) - n}: sign test p = {p:.3g}")
print(f"B / A pooled TPF {fa / fb:.3f}, paired bootstrap 95% interval {ratios[250]:.3f}-{ratios[9750]:.3f}")
