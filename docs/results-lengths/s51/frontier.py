"""Session 51: each model's in-range threshold curve (0.8 / 0.9 / 0.95 / 0.99, pooled over the records' prompts) and
its TPF linearly interpolated at matched accuracies, so that runs compare along the accuracy-TPF frontier, not at
one threshold.   python docs/results-lengths/s51/frontier.py NAME=FILE[,FILE...] ...   (records: thr + sweep)"""
import gzip
import json
import sys
from collections import defaultdict

from orl.eval.metrics import pooled_tpf


def curve(files):
    """[(accuracy, TPF, threshold, n)] of the in-range records, one per threshold, sorted by accuracy."""
    by = defaultdict(list)
    for f in files:
        for line in (gzip.open(f, "rt") if f.endswith(".gz") else open(f)):
            r = json.loads(line)
            if r["split"] == "heldout":
                by[r["decode"]["threshold"]].append(r)
    return sorted((sum(bool(r["verdict"]) for r in rs) / len(rs), pooled_tpf(rs)["tpf"], t, len(rs))
                  for t, rs in by.items())


def tpf_at(points, a):
    for (a0, r0, *_), (a1, r1, *_) in zip(points, points[1:]):
        if a0 <= a <= a1:
            return r0 + (r1 - r0) * (a - a0) / (a1 - a0)
    return float("nan")


levels = [0.36, 0.38, 0.40, 0.42, 0.43]
print(f"{'model':<14} " + "  ".join(f"thr {t}: acc, TPF (n)" for t in (0.8, 0.9, 0.95, 0.99)))
curves = {}
for arg in sys.argv[1:]:
    name, files = arg.split("=", 1)
    curves[name] = curve(files.split(","))
    print(f"{name:<14} " + "  ".join(f"{t}: {a:.3f}, {r:.2f} ({n})" for a, r, t, n in sorted(curves[name], key=lambda p: p[2])))
print(f"\nTPF interpolated at matched accuracy (nan: outside the curve)\n{'model':<14} " + " ".join(f"{x:>6.0%}" for x in levels))
for name, pts in curves.items():
    print(f"{name:<14} " + " ".join(f"{tpf_at(pts, x):>6.2f}" for x in levels))
