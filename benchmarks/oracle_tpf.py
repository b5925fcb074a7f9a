#!/usr/bin/env python
"""Oracle TPF per task family: what a perfectly calibrated model reaches with the threshold rule
(orl.eval.oracle) on the same held-out prompts `orl eval --limit N` uses, next to the TPF ceiling;
"acc" is the fraction of oracle decodes that end in a valid answer (parallel commits at a low
threshold can combine two answers into none).

The answers the generator can draw as a prompt's reference are enumerated (each checked by the
family's verifier) and weighted uniformly, which is the reference distribution of `split`, `keysort`
and `constr` (their docstrings); a single-answer family has one answer, so its oracle TPF is its
ceiling. The gap between a trained base's measured TPF and its family's oracle is what the model
could still gain by being confident where the task is determined; the gap between the oracle and the
ceiling is what only a model that prefers some valid answers over others can gain (ORL's room on
multi-answer families).

    python benchmarks/oracle_tpf.py --tasks split,keysort,prog,constr,long --limit 40
"""
from __future__ import annotations

import argparse
import itertools
import math
import re
import statistics

from orl.eval.oracle import oracle_decode
from orl.eval.tasks import get_task, task_names

EOS = "\0"


def reference_answers(task_name: str, prompt: str, reference: str) -> list[str]:
    """The answers the family's generator can draw as the reference of this prompt (each drawn with
    the same probability), found by brute force and checked by the verifier; [reference] for a
    single-answer prompt. For `keysort` and `constr` these are all valid answers; `split` draws only
    the splits without borrows."""
    if m := re.fullmatch(r"\?\+\?=([0-9]+)", prompt):
        pairs = itertools.product(*[[(str(x), str(int(d) - x)) for x in range(int(d) + 1)] for d in m[1]])
        cands = ("".join(x for x, _ in p) + "+" + "".join(y for _, y in p) for p in pairs)
    elif re.fullmatch(r"sort:[a-z][0-9](,[a-z][0-9])*=", prompt):
        cands = ("".join(p) for p in itertools.permutations(prompt[5:-1:3]))
    elif m := re.fullmatch(r"([0-9]+) of ([a-z]+), .*no equal neighbours:", prompt):
        cands = ("".join(t) for t in itertools.product(m[2], repeat=int(m[1])))
    elif m := re.fullmatch(r"arrange ([a-z]+), no equal neighbours:", prompt):
        cands = ("".join(p) for p in set(itertools.permutations(m[1])))
    elif m := re.fullmatch(r"([0-9]+) distinct digits sum .*", prompt):
        cands = ("".join(p) for p in itertools.permutations("0123456789", int(m[1])))
    else:
        return [reference]
    task = get_task(task_name)
    found = sorted({c for c in cands if task.verify(prompt, c)})
    if reference not in found:
        raise AssertionError(f"enumeration for {prompt!r} misses the reference {reference!r}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--thresholds", default="0.5,0.7,0.8,0.9,0.95")
    ap.add_argument("--block-len", type=int, default=16)
    args = ap.parse_args()
    names = task_names() if args.tasks == "all" else args.tasks.split(",")
    taus = [float(t) for t in args.thresholds.split(",")]
    print("| task | n | answers per prompt (median) | " + " | ".join(f"@{t} acc / TPF" for t in taus) + " | ceiling |")
    print("|---" * (len(taus) + 4) + "|")
    means = {t: [] for t in taus + ["ceiling"]}
    accs: dict = {t: [] for t in taus}
    for name in names:
        samples = [get_task(name).sample("heldout", i) for i in range(args.limit)]
        answers = [reference_answers(name, s.prompt, s.answer) for s in samples]
        row, acc = {}, {}
        for tau in taus:
            rs = [oracle_decode({a: 1.0 for a in ans}, EOS, tau, args.block_len) for ans in answers]
            # DESIGN section 5: a ratio of sums over the prompts, as the measured TPFs it is set beside
            row[tau] = sum(r.n_tokens for r in rs) / sum(r.forwards for r in rs)
            acc[tau] = statistics.mean(r.valid for r in rs)
        # every valid answer of these families has the reference's length, hence its ceiling (again pooled:
        # all tokens / all fewest forwards, one per block plus the commits between blocks)
        lens = [len(s.answer) + 1 for s in samples]
        row["ceiling"] = ceil = sum(lens) / sum(2 * math.ceil(n / args.block_len) - 1 for n in lens)
        for k, v in row.items():
            means[k].append(v)
        for t in taus:
            accs[t].append(acc[t])
        med = statistics.median(len(a) for a in answers)
        print(f"| {name} | {len(samples)} | {med:g} | " + " | ".join(f"{100 * acc[t]:.0f}% / {row[t]:.2f}" for t in taus) + f" | {ceil:.2f} |")
    print("| **mean** | | | " + " | ".join(f"{100 * statistics.mean(accs[t]):.0f}% / {statistics.mean(means[t]):.2f}" for t in taus)
          + f" | {statistics.mean(means['ceiling']):.2f} |")


if __name__ == "__main__":
    main()
