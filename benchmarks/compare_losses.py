#!/usr/bin/env python
"""Paired training-loss curves of two pretraining runs that share batches (same seed, tasks and mix):
mean loss and per-family loss per window of steps, over the steps both logs have.

    python benchmarks/compare_losses.py runs/tiny7-base/train.log.jsonl runs/tiny7-nooffset/train.log.jsonl --window 200
"""
from __future__ import annotations

import argparse
import json
import statistics


def load(path: str) -> dict[int, dict]:
    steps: dict[int, dict] = {}
    for line in open(path):
        r = json.loads(line)
        steps[r["step"]] = r  # logs from before open_log dropped a resume's repeated steps: the last wins
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--window", type=int, default=100)
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    common = sorted(set(a) & set(b))
    families = list(a[common[0]]["task_loss"])
    print("steps      loss A  loss B  " + "  ".join(f"{f:>13}" for f in families) + "   (per family: A / B)")
    for lo in range(0, len(common), args.window):
        s = common[lo: lo + args.window]
        mean = lambda run, key: statistics.mean(run[k][key] for k in s)  # noqa: E731
        fam = "  ".join(f"{statistics.mean(a[k]['task_loss'][f] for k in s):>6.2f}/"
                        f"{statistics.mean(b[k]['task_loss'][f] for k in s):<6.2f}" for f in families)
        print(f"{s[0]:>5}-{s[-1]:<5} {mean(a, 'loss'):>6.3f}  {mean(b, 'loss'):>6.3f}  {fam}")


if __name__ == "__main__":
    main()
