#!/usr/bin/env python
"""Where a block-diffusion checkpoint's accuracy goes between autoregressive order and parallel commits
(issue 21: the beyond-range skill of the AR stage does not survive stage 2 at threshold 0.9).

One checkpoint, the same prompts, five decoders that each add one difference to the one before:

    ar_grid  block_len 1 on the absolute grid: one position per block and a causal prompt, i.e. the AR
             decoder on the same weights (the shifted read-out reads each token off the clean position
             before it; tests/test_decode_ladder.py)
    ar       block_len 1 in the checkpoint's own layout: for a prompt_block checkpoint the prompt is one
             bidirectional block again, as it was trained (on a grid checkpoint: the same as ar_grid)
    l2r      the checkpoint's block, left to right one token per forward (fast_dllm_v2 with sub-blocks
             of 1; as in Fast-dLLM v2, a block's first token is read off the commit forward before it):
             the same order, but the rest of the block is masks
    topk     one token per forward, the most confident first (any order)
    thresh   the threshold rule at --threshold: every position at or above it per forward (the headline)

With --ar-model, the stage-1 (AR) checkpoint decoded by its own decoder is a first row ("stage1"), so
the weights (stage1 -> ar_grid), the prompt's attention (ar_grid -> ar) and decoding (ar -> thresh)
separate. Each row after the first gives the paired counts against the row above (prompts right only
above / only here) and the exact McNemar p-value.

    python benchmarks/decode_ladder.py --model runs/hint4d --ar-model runs/hint4 --tasks long7xp \
        --splits heldout,beyond --limit 100 --max-new-tokens 104 --out runs/eval/hint4d-ladder.jsonl

With --vs, a second checkpoint goes down the same rungs on the same prompts, and a second table pairs the two
rung by rung (prompts right only with --model / only with --vs, McNemar p): e.g. two stage-2 recipes from one
stage-1 checkpoint.

Records are appended to --out (orl eval's resumable JSONL: a rerun only decodes what is missing).
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from orl.eval import metrics
from orl.eval.headline import pair_key
from orl.eval.runner import EvalSpec, run_eval

RUNGS = {  # name -> decode settings over the checkpoint's (an empty dict: the checkpoint's own decoder)
    "ar_grid": {"block_len": 1, "layout": "absolute_grid"},
    "ar": {"block_len": 1},
    "l2r": {"rule": "fast_dllm_v2", "small_block_size": 1},
    "topk": {"rule": "topk", "steps_per_block": 0},
    "thresh": {"rule": "threshold"},
}


def ladder_rows(by_rung: dict[str, list[dict]]) -> list[dict]:
    """One row per (split, task, rung) in the rungs' order: n, accuracy, TPF (ratio of sums), and against
    the rung before it on the same prompts: (only before, only here, McNemar p)."""
    rows = []
    groups = sorted({(r["split"], r["task"]) for recs in by_rung.values() for r in recs})
    for split, task in groups:
        prev = None
        for rung, recs in by_rung.items():
            mine = [r for r in recs if r["split"] == split and r["task"] == task]
            if not mine:
                continue
            verdicts = {pair_key(r): bool(r["verdict"]) for r in mine}
            row = {"split": split, "task": task, "rung": rung, "n": len(mine),
                   "acc": 100 * metrics.accuracy(list(verdicts.values())),
                   "tpf": metrics.pooled_tpf(mine)["tpf"]}
            if prev is not None:
                n, b, c = metrics.paired_counts(prev, verdicts)
                if n != len(verdicts) or n != len(prev):  # e.g. an --out that also holds another --limit's records
                    raise SystemExit(f"{split} {task}: {rung} and the rung above answered different prompts "
                                     f"({len(prev)} and {len(verdicts)}, {n} shared); use a fresh --out")
                row.update(lost=b, gained=c, p=metrics.mcnemar_exact(b, c))
            rows.append(row)
            prev = verdicts
    return rows


def versus_rows(mine: dict[str, list[dict]], other: dict[str, list[dict]]) -> list[dict]:
    """One row per (split, task, rung) both ladders decoded: each one's accuracy and the paired counts
    (right only in mine, only in other, McNemar p) over the same prompts."""
    rows = []
    for rung in [r for r in mine if r in other]:
        groups = sorted({(r["split"], r["task"]) for r in mine[rung]})
        for split, task in groups:
            a, b = ({pair_key(r): bool(r["verdict"]) for r in recs if r["split"] == split and r["task"] == task}
                    for recs in (mine[rung], other[rung]))
            n, only_a, only_b = metrics.paired_counts(a, b)
            if n != len(a) or n != len(b):
                raise SystemExit(f"{split} {task} {rung}: the two checkpoints answered different prompts "
                                 f"({len(a)} and {len(b)}, {n} shared); use the same --limit and a fresh --out")
            rows.append({"split": split, "task": task, "rung": rung, "n": n,
                         "acc_a": 100 * metrics.accuracy(list(a.values())),
                         "acc_b": 100 * metrics.accuracy(list(b.values())),
                         "only_a": only_a, "only_b": only_b, "p": metrics.mcnemar_exact(only_a, only_b)})
    return rows


def format_versus(rows: list[dict], a: str, b: str) -> str:
    lines = [f"{'split':8} {'task':10} {'rung':7} {'n':>4} {a[:10]:>10} {b[:10]:>10}  only {a[:10]} / only {b[:10]}, p"]
    for r in rows:
        lines.append(f"{r['split']:8} {r['task']:10} {r['rung']:7} {r['n']:>4} {r['acc_a']:>9.1f}% {r['acc_b']:>9.1f}%"
                     f"  {r['only_a']:>3} / {r['only_b']:<3} p={r['p']:.2g}")
    return "\n".join(lines)


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'split':8} {'task':10} {'rung':7} {'n':>4} {'acc %':>6} {'TPF':>5}  vs row above (lost / gained, p)"]
    for r in rows:
        vs = f"{r['lost']:>3} / {r['gained']:<3} p={r['p']:.2g}" if "p" in r else ""
        lines.append(f"{r['split']:8} {r['task']:10} {r['rung']:7} {r['n']:>4} {r['acc']:>6.1f} {r['tpf']:>5.2f}  {vs}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="block-diffusion checkpoint")
    ap.add_argument("--ar-model", help="its stage-1 (autoregressive) checkpoint: a first row, its own decoder")
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--splits", default="heldout,beyond")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=104)
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--rungs", default=",".join(RUNGS), help=f"some of {','.join(RUNGS)} (rows in the order given)")
    ap.add_argument("--vs", help="a second checkpoint down the same rungs, paired with --model rung by rung")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rungs = args.rungs.split(",")
    if unknown := [r for r in rungs if r not in RUNGS]:
        ap.error(f"unknown rungs {unknown}; expected some of {list(RUNGS)}")
    tasks, splits = args.tasks.split(","), args.splits.split(",")

    def descend(plan: list[tuple[str, str, dict]]) -> dict[str, list[dict]]:
        by_rung: dict[str, list[dict]] = defaultdict(list)
        for rung, model, decode in plan:
            for split in splits:
                spec = EvalSpec(model=model, out=args.out, tasks=tasks, split=split, limit=args.limit,
                                thresholds=[args.threshold], decode={"max_new_tokens": args.max_new_tokens, **decode},
                                progress=False)
                by_rung[rung] += run_eval(spec)
        return by_rung

    stage1 = [("stage1", args.ar_model, {})] if args.ar_model else []
    mine = descend(stage1 + [(r, args.model, RUNGS[r]) for r in rungs])
    print(format_rows(ladder_rows(mine)))
    if args.vs:
        other = descend([(r, args.vs, RUNGS[r]) for r in rungs])
        print(f"\n{args.model} against {args.vs}, rung by rung:")
        names = (Path(args.model).name, Path(args.vs).name)
        if names[0] == names[1]:  # runs/a/final against runs/b/final: name them by their parents too
            names = tuple("/".join(Path(m).parts[-2:]) for m in (args.model, args.vs))
        print(format_versus(versus_rows(mine, other), *names))


if __name__ == "__main__":
    main()
