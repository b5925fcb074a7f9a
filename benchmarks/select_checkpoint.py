#!/usr/bin/env python
"""Pick each run's checkpoint on validation records, then report its test records beside the final one's.

Evaluate every checkpoint of a run on validation prompts (another prompt seed than the test's), and the
candidates on the test prompts, then:

    orl eval --model RUN-at5000 --tasks long7xp,prog7xp --split beyond --limit 100 --seed 100 --out val.jsonl
    ...                                      (and --split heldout, and every other checkpoint)
    python benchmarks/select_checkpoint.py --val val.jsonl --test test.jsonl \\
        --run seed1=RUN1-at3500,RUN1-at5000,RUN1 --run seed2=RUN2-at3500,RUN2-at5000,RUN2 [--min-in-range 0.9]

Checkpoints are named as the records name them (the directory's name) and listed earliest first; the last
is the run's final checkpoint. `--kept RUN_DIR` lists them from disk instead: the copies PretrainConfig.keep_every
left beside the run (RUN_DIR-atSTEP, by step) that have the final checkpoint's objective (a block-diffusion run's
AR-stage copies are not candidates) and come before its step (a run resumed with fewer steps leaves later ones), then
the run; `--from-step N` keeps the copies from step N on (the grid fixed before the run). Without --test only the
validation tables are printed; --names-only prints one "LABEL CHOSEN" line per run (for scripts:
benchmarks/gpu_lengths.sh). The choice reads only --val (orl/eval/select.py: mean accuracy over the families on
--split, ties to the later checkpoint, validation prompts also in --test left out). The test
table pairs chosen against final on the prompts both answered (exact McNemar); the last table is the mean
over runs, the number a selection protocol would report.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from orl.atomic_dir import read_manifest
from orl.eval import metrics
from orl.eval.records import read_records
from orl.eval.select import score, select, verdicts


def parse_run(text: str) -> tuple[str, list[str]]:
    label, sep, names = text.partition("=")
    names = [n for n in names.split(",") if n]
    if not sep or not label or not names:
        raise argparse.ArgumentTypeError(f"--run wants LABEL=CKPT,CKPT,...,FINAL, got {text!r}")
    return label, names


def kept(run_dir: str, from_step: int = 0) -> tuple[str, list[str]]:
    """(label, candidates) of a run directory and the keep_every copies beside it from step `from_step` on (a
    grid fixed before the run: the early copies need no validation records)."""
    run = Path(run_dir).resolve()
    manifest = read_manifest(run) or {}
    objective, recipe = manifest.get("objective"), manifest.get("recipe") or {}
    if objective is None:
        raise SystemExit(f"--kept {run_dir}: not a checkpoint directory (no orl.json with an objective)")
    last = recipe.get("step", recipe.get("update"))  # a copy at or past it is left from a longer attempt
    steps = []
    for d in run.parent.glob(f"{run.name}-at*"):
        step = d.name[len(run.name) + 3:]
        if (step.isdigit() and d.is_dir() and (read_manifest(d) or {}).get("objective") == objective
                and (not isinstance(last, int) or int(step) < last) and int(step) >= from_step):
            steps.append((int(step), d.name))
    return run.name, [name for _, name in sorted(steps)] + [run.name]


def pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def paired(test: list[dict], chosen: str, final: str) -> tuple[dict, dict]:
    """Both checkpoints' test verdicts on the prompts both answered (a prompt only one has is left out)."""
    a, b = verdicts(test, chosen), verdicts(test, final)
    for name, v in ((chosen, a), (final, b)):
        if not v:
            raise SystemExit(f"no test records of {name!r}: evaluate it on the test prompts too")
    both = a.keys() & b.keys()
    if not both:
        raise SystemExit(f"{chosen!r} and {final!r} share no test prompt")
    return {k: a[k] for k in both}, {k: b[k] for k in both}


def paired_rows(a: dict, b: dict) -> list[tuple]:
    """(split, family, n, chosen acc, final acc, only chosen, only final, p) of paired verdicts."""
    groups = defaultdict(list)
    for k in a:
        groups[k[:2]].append(k)
    rows = []
    for (split, fam), ks in sorted(groups.items()):
        n, only_a, only_b = metrics.paired_counts({k: a[k] for k in ks}, {k: b[k] for k in ks})
        rows.append((split, fam, n, sum(a[k] for k in ks) / n, sum(b[k] for k in ks) / n, only_a, only_b,
                     metrics.mcnemar_exact(only_a, only_b)))
    return rows


def print_validation(label: str, sel, args) -> None:
    splits = sorted({s for c in sel.candidates for s in c.acc})
    cols = [(s, f) for s in splits for f in sorted(sel.candidates[0].acc[s])]
    print(f"run {label}: validation, {sel.candidates[0].n} prompts per checkpoint"
          + (f" ({sel.left_out} left out: also test prompts)" if sel.left_out else ""))
    print(f"  {'checkpoint':<28}" + "".join(f" {s[:7] + ' ' + f:>18}" for s, f in cols) + f" {'mean ' + sel.split:>12}")
    for c in sel.candidates:
        mark = " <- chosen" if c.name == sel.chosen else ""
        print(f"  {c.name[-28:]:<28}" + "".join(f" {pct(c.acc[s][f]):>18}" for s, f in cols)
              + f" {pct(c.mean(sel.split)):>12}{mark}")
    if not sel.floor_met:
        print(f"  no checkpoint reaches {args.min_in_range:.0%} mean {args.in_range} on validation: the final one is kept")


def print_test(test: list[dict], chosen: str, final: str) -> tuple:
    """The paired test table of chosen against final; (chosen, its test scores, the final's), both on the
    prompts both answered."""
    try:
        a, b = paired(test, chosen, final)
    except ValueError as e:
        raise SystemExit(f"test records: {e}") from None
    rows = paired_rows(a, b)
    if chosen == final:
        print(f"  test: the final checkpoint {final} is chosen")
    else:
        print(f"  test, chosen {chosen} vs final {final}:")
        print(f"    {'split':<8} {'family':<10} {'n':>5} {'chosen':>7} {'final':>7} {'only ch.':>8} {'only fin.':>9} {'p':>8}")
        for split, fam, n, ra, rb, oa, ob, p in rows:
            print(f"    {split:<8} {fam:<10} {n:>5} {pct(ra):>7} {pct(rb):>7} {oa:>8} {ob:>9} {p:>8.2g}")
    return chosen, score(a, chosen), score(b, final)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--val", nargs="+", required=True, help="validation records (the only input to the choice)")
    ap.add_argument("--test", nargs="+", default=[], help="test records of the final and chosen checkpoints")
    ap.add_argument("--run", action="append", type=parse_run, default=[], metavar="LABEL=CKPT,...,FINAL")
    ap.add_argument("--kept", action="append", default=[], metavar="RUN_DIR",
                    help="a run whose candidates are its keep_every copies beside it, then itself")
    ap.add_argument("--from-step", type=int, default=0, metavar="N",
                    help="with --kept: only the copies from step (update) N on, then the run itself")
    ap.add_argument("--names-only", action="store_true", help='print "LABEL CHOSEN" per run, nothing else')
    ap.add_argument("--split", default="beyond", help="the split whose mean family accuracy is maximised")
    ap.add_argument("--in-range", default="heldout", help="the split --min-in-range applies to")
    ap.add_argument("--min-in-range", type=float, default=0.0,
                    help="only checkpoints whose mean accuracy on --in-range reaches this fraction")
    args = ap.parse_args()
    runs = args.run + [kept(d, args.from_step) for d in args.kept]
    if not runs:
        ap.error("name the runs: --run LABEL=CKPT,...,FINAL or --kept RUN_DIR")
    val, test = read_records(args.val), read_records(args.test) if args.test else []
    summary = []
    for label, names in runs:
        try:
            sel = select(val, names, test, args.split, args.min_in_range, args.in_range)
        except ValueError as e:
            raise SystemExit(f"run {label}: {e}") from None
        if args.names_only:
            print(label, sel.chosen)
            continue
        print_validation(label, sel, args)
        if test:
            summary.append(print_test(test, sel.chosen, names[-1]))
        print()
    if not summary:
        return
    print(f"test mean accuracy over families on the prompts both answered (per run, then the mean over {len(summary)} runs):")
    splits = sorted({s for _, c, _ in summary for s in c.acc})
    print(f"  {'run':<10} {'chosen':<28}" + "".join(f" {s + ' chosen':>16} {s + ' final':>14}" for s in splits))
    for (label, _), (chosen, c, f) in zip(runs, summary):
        print(f"  {label:<10} {chosen[-28:]:<28}" + "".join(f" {pct(c.mean(s)):>16} {pct(f.mean(s)):>14}" for s in splits))
    print(f"  {'mean':<10} {'':<28}" + "".join(
        f" {pct(sum(c.mean(s) for _, c, _ in summary) / len(summary)):>16}"
        f" {pct(sum(f.mean(s) for _, _, f in summary) / len(summary)):>14}" for s in splits))


if __name__ == "__main__":
    main()
