"""Issue 22's ORL target at matched accuracy: the relabelled arm at one threshold against the converted model at
another, on the same questions (seeds 0-2 in range): TPF ratio (ratios of sums, pooled and per seed), accuracy
difference and the paired McNemar p.

    python docs/results-gemma/orl-s56/target.py docs/results-gemma/orl-s56/records ref@0.5 conv@0.9 ref@0.5 conv@0.95
"""
import importlib.util
import sys
from pathlib import Path

from orl.eval import metrics

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("text_table", ROOT / "benchmarks" / "text_table.py")
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)

recs_dir, pairs = Path(sys.argv[1]), sys.argv[2:]
SEEDS = [0, 1, 2]
for new, old in zip(pairs[::2], pairs[1::2]):
    (m1, t1), (m2, t2) = ((m, float(t)) for m, t in (p.split("@") for p in (new, old)))
    a, b = tt.groups([recs_dir], m1, "seed", SEEDS)[t1], tt.groups([recs_dir], m2, "seed", SEEDS)[t2]
    n, only_a, only_b = metrics.paired_counts({tt.key(r): r["verdict"] for r in a}, {tt.key(r): r["verdict"] for r in b})
    acc = [100 * metrics.accuracy([r["verdict"] for r in x]) for x in (a, b)]
    ratio = metrics.pooled_tpf(a)["tpf"] / metrics.pooled_tpf(b)["tpf"]
    per_seed = [metrics.pooled_tpf([r for r in a if r["_seed"] == s])["tpf"]
                / metrics.pooled_tpf([r for r in b if r["_seed"] == s])["tpf"] for s in SEEDS]
    print(f"{new} vs {old}: TPF x{ratio:.2f} (seeds {min(per_seed):.2f}-{max(per_seed):.2f}), accuracy {acc[0]:.1f}% vs "
          f"{acc[1]:.1f}% ({acc[0] - acc[1]:+.1f} pts; {only_a} vs {only_b} right only there, McNemar p = "
          f"{metrics.mcnemar_exact(only_a, only_b):.2g}, n = {n})")
