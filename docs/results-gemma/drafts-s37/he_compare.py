"""Pairs two orl eval record files by prompt: identical outputs, pass@1 each, TPF (ratio of sums), tokens/s."""
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
A, B = {r["prompt_id"]: r for r in a}, {r["prompt_id"]: r for r in b}
keys = sorted(set(A) & set(B))
same = sum(A[k]["output_text"] == B[k]["output_text"] for k in keys)
def tpf(rs):
    toks = sum(r["n_tokens"] for r in rs); fw = sum(sum(v for v in r["forwards"].values() if k != "prefill") for r in rs for k in [None])
    return toks, sum(r["forwards"]["step"] + r["forwards"]["commit"] for r in rs)
for name, R in (("A", A), ("B", B)):
    rs = [R[k] for k in keys]
    toks = sum(r["n_tokens"] for r in rs); fw = sum(r["forwards"]["step"] + r["forwards"]["commit"] for r in rs)
    secs = sum(r["timing"]["total_s"] for r in rs)
    print(f"{name} {rs[0]['model']['name']}: pass@1 {sum(r['verdict'] for r in rs)}/{len(rs)}, tokens {toks}, forwards {fw}, "
          f"TPF {toks / fw:.3f}, tokens/s (sum/sum) {toks / secs:.2f}")
print(f"identical outputs: {same}/{len(keys)}")
