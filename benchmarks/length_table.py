#!/usr/bin/env python
"""In-range vs beyond-the-range accuracy and TPF from `orl eval` records (tasks v7, issue 21).

Evaluate each checkpoint on both splits (the answers beyond long7's range need 112 tokens):

    orl eval --model M --tasks split7,keysort7,prog7,constr7,long7 --split heldout --max-new-tokens 112 --out R.jsonl
    orl eval --model M --tasks split7,keysort7,prog7,constr7,long7 --split beyond  --max-new-tokens 112 --out R.jsonl
    python benchmarks/length_table.py R.jsonl [more.jsonl ...] [--by-size]

One row per (model, decoder, threshold, split, family) plus an "all" row per split: n, accuracy, TPF
as a ratio of sums (all generated tokens up to and including EOS / all forwards), the same without
the EOS token, and the per-sample mean TPF (labelled; not the primary number). --by-size adds one row
per size (digits, records, assignments, letters: orl/eval/tasks/__init__.py).
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from orl.eval import metrics
from orl.eval.records import decoder_label, read_records
from orl.eval.tasks import get_task


def row(recs: list[dict]) -> dict:
    t = metrics.pooled_tpf(recs)  # the one definition of DESIGN section 5
    return {"n": len(recs), "acc": sum(bool(r["verdict"]) for r in recs) / len(recs),
            "tpf": t["tpf"], "tpf_no_eos": t["tpf_no_eos"], "tpf_mean": t["tpf_sample_mean"]}


def table(records: list[dict], by_size: bool) -> list[tuple[tuple, dict]]:
    # A prompt evaluated again under the same decoder with another answer budget (--max-new-tokens)
    # counts once: its last record.
    latest = {(r["model"]["id"], decoder_label(r["decode"]), r["decode"].get("threshold"), r["prompt_id"],
               r["sample"]): r for r in records}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in latest.values():
        model = r["model"].get("name") or r["model"]["id"]
        head = (model, decoder_label(r["decode"]), r["decode"].get("threshold", "-"), r["split"])
        groups[head + ("all",)].append(r)
        groups[head + (r["task"],)].append(r)
        task = get_task(r["task"])
        if by_size and hasattr(task, "size"):
            groups[head + (f"{r['task']}@{task.size(r['prompt'])}",)].append(r)
    return [(k, row(v)) for k, v in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+")
    ap.add_argument("--by-size", action="store_true", help="one row per prompt size as well")
    args = ap.parse_args()
    print(f"{'model':<22} {'decoder':<14} {'tau':>5} {'split':<8} {'family':<14} {'n':>5} {'acc':>6} "
          f"{'TPF':>6} {'noEOS':>6} {'mean*':>6}")
    for (model, dec, tau, split, fam), v in table(read_records(args.records), args.by_size):
        print(f"{model[-22:]:<22} {dec:<14} {str(tau):>5} {split:<8} {fam:<14} {v['n']:>5} {v['acc']:>6.3f} "
              f"{v['tpf']:>6.2f} {v['tpf_no_eos']:>6.2f} {v['tpf_mean']:>6.2f}")
    print("TPF = sum of tokens (incl. EOS) / sum of forwards; noEOS without the EOS token; mean* = per-sample mean")


if __name__ == "__main__":
    main()
