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
if not pairs or len(pairs) % 2 or not all(p.count("@") == 1 for p in pairs):
    raise SystemExit("usage: target.py RECORDS_DIR NEW@THRESHOLD OLD@THRESHOLD [NEW@THRESHOLD OLD@THRESHOLD ...]")
SEEDS = [0, 1, 2]


def at(model: str, tau: str) -> dict:
    by_tau = tt.groups([recs_dir], model, "seed", SEEDS)
    if float(tau) not in by_tau:
        raise SystemExit(f"{model}: no records at threshold {tau} (has {sorted(t for t in by_tau if t is not None)})")
    return {tt.key(r): r for r in by_tau[float(tau)]}


for new, old in zip(pairs[::2], pairs[1::2]):
    a, b = at(*new.split("@")), at(*old.split("@"))
    both = sorted(set(a) & set(b))  # every number over the questions both answered
    a, b = [a[k] for k in both], [b[k] for k in both]
    n, only_a, only_b = metrics.paired_counts({tt.key(r): r["verdict"] for r in a}, {tt.key(r): r["verdict"] for r in b})
    acc = [100 * metrics.accuracy([r["verdict"] for r in x]) for x in (a, b)]
    ratio = metrics.pooled_tpf(a)["tpf"] / metrics.pooled_tpf(b)["tpf"]
    per_seed = [metrics.pooled_tpf([r for r in a if r["_seed"] == s])["tpf"]
                / metrics.pooled_tpf([r for r in b if r["_seed"] == s])["tpf"] for s in SEEDS]
    print(f"{new} vs {old}: TPF x{ratio:.2f} (seeds {min(per_seed):.2f}-{max(per_seed):.2f}), accuracy {acc[0]:.1f}% vs "
          f"{acc[1]:.1f}% ({acc[0] - acc[1]:+.1f} pts; {only_a} vs {only_b} right only there, McNemar p = "
          f"{metrics.mcnemar_exact(only_a, only_b):.2g}, n = {n})")
