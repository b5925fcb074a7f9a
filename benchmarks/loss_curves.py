#!/usr/bin/env python
"""Per-family training-loss curves of several pretraining runs, one row per run and family: the mean loss
over each window of steps (and, for a balanced mix, the family's mean rows per step over the whole run).
Shows which family a run learns first and where each one is when the budget ends.

    python benchmarks/loss_curves.py ~/.cache/orl/runs/hint4*/ --families long7xp,prog7xp --window 500
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load(run: str) -> list[dict]:
    path = Path(run)
    path = path / "train.log.jsonl" if path.is_dir() else path
    steps: dict[int, dict] = {}
    for line in open(path):
        r = json.loads(line)
        steps[r["step"]] = r  # a resumed run logs a few steps twice; the last record wins
    return [steps[k] for k in sorted(steps)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories or their train.log.jsonl")
    ap.add_argument("--families", default="", help="comma-separated; default: every family of the first run")
    ap.add_argument("--window", type=int, default=500)
    args = ap.parse_args()
    logs = {run.rstrip("/"): load(run) for run in args.runs}
    first = next(iter(logs.values()))
    families = args.families.split(",") if args.families else list(first[0]["task_loss"])
    longest = max(len(v) for v in logs.values())
    heads = [f"{lo + 1}-{min(lo + args.window, longest)}" for lo in range(0, longest, args.window)]
    print(f"| run | family | {' | '.join(heads)} | rows/step |")
    print("|---|---|" + "---:|" * (len(heads) + 1))
    for run, recs in logs.items():
        for fam in families:
            cells = []
            for lo in range(0, longest, args.window):
                vals = [r["task_loss"][fam] for r in recs[lo: lo + args.window] if fam in r.get("task_loss", {})]
                cells.append(f"{statistics.mean(vals):.3f}" if vals else "")
            rows = [r["rows"][fam] for r in recs if fam in r.get("rows", {})]
            print(f"| {Path(run).name} | {fam} | {' | '.join(cells)} | {statistics.mean(rows):.1f} |" if rows else
                  f"| {Path(run).name} | {fam} | {' | '.join(cells)} | fixed |")


if __name__ == "__main__":
    main()
