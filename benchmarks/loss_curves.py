#!/usr/bin/env python
"""Per-family training-loss curves of several pretraining runs, one row per run and family: the mean loss
over each window of one stage's steps (a window never mixes the AR and diffusion losses), and for a balanced
mix (orl/train/mix.py) the family's mean rows per step in that stage. Shows which family a run learns first
and where each one is when the budget ends.

    python benchmarks/loss_curves.py ~/.cache/orl/runs/hint4*/ --families long7xp,prog7xp --window 500
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from compare_losses import load as load_steps


def load(run: str, stage: str) -> list[dict]:
    path = Path(run)
    path = path / "train.log.jsonl" if path.is_dir() else path
    steps = load_steps(str(path))
    recs = [steps[k] for k in sorted(steps) if steps[k].get("stage", "ar") == stage]
    if not recs:
        raise SystemExit(f"{path}: no steps of stage {stage!r}")
    return recs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories or their train.log.jsonl")
    ap.add_argument("--families", default="", help="comma-separated; default: every family of the first run")
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--stage", default="ar", help="ar | diffusion | ar2 (the log's stage names)")
    args = ap.parse_args()
    logs = {run.rstrip("/"): load(run, args.stage) for run in args.runs}
    families = args.families.split(",") if args.families else list(dict.fromkeys(
        f for recs in logs.values() for f in recs[0]["task_loss"]))
    longest = max(len(v) for v in logs.values())
    first = min(recs[0]["step"] for recs in logs.values())  # the stage's first step (runs of one recipe)
    heads = [f"{first + lo}-{first + min(lo + args.window, longest) - 1}" for lo in range(0, longest, args.window)]
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
