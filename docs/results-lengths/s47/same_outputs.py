#!/usr/bin/env python
"""Do two `orl eval` record files hold the same output tokens on every prompt both answered?
    python docs/results-lengths/s47/same_outputs.py A.jsonl[.gz] B.jsonl[.gz]
Prints the prompts in common, how many outputs are identical token for token, and the first differing ones;
exit status 1 when any differ (a draft-only drafter must emit its verifier's tokens exactly)."""
import gzip
import json
import sys


def read(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return {(r["prompt_id"], r["sample"]): r["output_ids"] for r in map(json.loads, f)}


a, b = read(sys.argv[1]), read(sys.argv[2])
common = sorted(a.keys() & b.keys())
diff = [k for k in common if a[k] != b[k]]
print(f"{len(common)} prompts in common, {len(common) - len(diff)} identical outputs, {len(diff)} differ")
for k in diff[:5]:
    print("  differs:", k)
sys.exit(1 if diff or not common else 0)
