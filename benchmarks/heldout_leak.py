#!/usr/bin/env python
"""In-range accuracy of long7xp and prog7xp split into problems the shipped tiny7 base trained on under other
markers ("seen") and problems it never trained on ("clean"), from `orl eval` records.

Why: long7xp and prog7xp (orl/eval/tasks/hinted.py) split train / held-out by hashing the prompt WITH its markers,
so a held-out prompt with its marker run shifted is often a training prompt (tests/test_tasks_marker_split.py,
docs/TASKS.md). Their in-range ("heldout") accuracy is then partly on problems the model was trained on. split7xp,
constr7xp and keysort7x are not affected (their `canonical` drops the markers); `beyond` is not (sizes never trained).

    python benchmarks/heldout_leak.py RECORDS.jsonl[.gz] [...] [--paired A B] [--threshold 0.9] [--by-size]
        [--budget N] [--extra-stage base7-more] [--manifest checkpoints/orl-tiny7-base/orl.json]
        [--orl checkpoints/orl-tiny7-orl/orl.json] [--markdown]

What "the same problem" is: `canonical` renames a prompt's marker run to start at the alphabet's first marker
(each marker replaced by its rank in the run: `echo h=8;i=h-0;j=i+8:h` and `echo c=8;d=c-0;e=d+8:c` both become
`echo a=8;b=a-0;c=b+8:a`; long7xp's markers rank over a-zA-Z, prog7xp's over a-z), so two prompts that differ only by
their marker run compare equal. The helpers long7xpf and prog7xpf are the family's own prompt with spaces before the
`=` / `:`: with the spaces dropped a draw of theirs is the same problem, and is counted as seen too (the source is
reported). long7xpo counts at offset 0 only (`cumsum+0:` is long7xp's problem); no shipped recipe trains it.

How "seen" is decided: EXACT DRAWS, not a bound. `training_keys` replays each stage's exact stream of training
draws (benchmarks/training_draws.py, checked against orl.train.pretrain.make_batches itself by
tests/test_heldout_leak.py) and calls the project's own `Task.sample` for every draw of the tasks above (~20 s on
one CPU thread for the shipped chain).

Stages: benchmarks/training_draws.py (the shipped base's init chain, and `--orl`'s rollout prompts).

--budget N: instead of each stage's recorded draws (steps x mix), the first N draws of each of the tasks above in
every stage, in the same stream (continued past the stage's last step when N exceeds them): a sensitivity check, or
an explicit bound for a stage whose step count is in doubt.

Output: per (model, decoder, family) the in-range records: n, accuracy on all, n and accuracy on clean and seen
records; `seen_via_helper` counts the seen records whose only trained copy was a helper draw. --paired A B (model
names as printed; repeatable): per family and both together, the two models' accuracy on the clean records both
answered, the discordant counts b (only A right) and c (only B right) and the exact McNemar p (orl.eval.metrics),
samples paired as orl.eval.headline.pair_key; the same on all records for reference. --by-size adds one row per size
(seen problems are mostly the shortest: accuracy on clean vs seen is confounded by size).
"""
from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections import defaultdict
from pathlib import Path

from orl.eval import metrics
from orl.eval.headline import pair_key
from orl.eval.records import decoder_label, read_records
from orl.eval.tables import markdown_table, text_table
from orl.eval.tasks import get_task
from orl.eval.tasks.hinted import MARKERS

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: the training stream replay beside this script
from training_draws import (EXTRA, MANIFEST, Stage, base_stages, rollout_samples, stage_indices,  # noqa: E402
                            with_extra)

FAMILIES = ("long7xp", "prog7xp")  # the families whose held-out split hashes the markers (in-range records only)
# training tasks whose draws pose a FAMILIES problem: task -> the family whose problem it is
PROBLEM_OF = {"long7xp": "long7xp", "long7xpf": "long7xp", "long7xpo": "long7xp",
              "prog7xp": "prog7xp", "prog7xpf": "prog7xp"}
ALPHABET = {"long7xp": MARKERS, "prog7xp": string.ascii_lowercase}
_LONG = re.compile(r"cumsum(\+0)?:((?:[a-zA-Z][1-9])+) *=([a-zA-Z])")
_PROG = re.compile(r"echo ([a-z]=[^:]*?) *:([a-z])")


def canonical(task: str, prompt: str) -> str | None:
    """The problem a prompt of `task` poses, as `family|prompt` with the family's format (no filler spaces) and its
    marker run renamed to start at the alphabet's first marker (each marker -> its rank in the run); None for a
    prompt that poses no long7xp / prog7xp problem (another task, a malformed prompt, long7xpo past offset 0)."""
    family = PROBLEM_OF.get(task)
    if family is None:
        return None
    alphabet = ALPHABET[family]
    if family == "long7xp":
        m = _LONG.fullmatch(prompt)
        if m is None or bool(m[1]) != (task == "long7xpo"):
            return None
        marks = m[2][::2] + m[3]
        rank = {c: alphabet[i] for i, c in enumerate(sorted(set(marks), key=alphabet.index))}
        body = "".join(rank[c] + d for c, d in zip(m[2][::2], m[2][1::2]))
        return f"{family}|cumsum:{body}={rank[m[3]]}"
    m = _PROG.fullmatch(prompt)
    if m is None:
        return None
    marks = set(re.findall("[a-z]", m[1])) | {m[2]}
    rank = {c: alphabet[i] for i, c in enumerate(sorted(marks, key=alphabet.index))}
    return f"{family}|echo {re.sub('[a-z]', lambda x: rank[x[0]], m[1])}:{rank[m[2]]}"


def training_keys(stages: list[Stage], budget: int | None = None, log=None) -> dict[str, set[str]]:
    """canonical problem -> the 'stage/task' draws that posed it, over every draw of every stage that poses a
    FAMILIES problem (budget: the first `budget` draws of each such task per stage instead of steps x mix)."""
    keys: dict[str, set[str]] = {}
    for stage in stages:
        want = {t: budget if budget is not None else stage.steps * n
                for t, n in zip(stage.tasks, stage.mix) if t in PROBLEM_OF and n > 0}
        before = len(keys)
        for name, index in stage_indices(stage, want):
            key = canonical(name, get_task(name).sample("train", index).prompt)
            if key is not None:
                keys.setdefault(key, set()).add(f"{stage.name}/{name}")
        if log:
            log(f"stage {stage.name} (seed {stage.seed}, {stage.steps} steps; {stage.source}): draws "
                + ", ".join(f"{t} {n}" for t, n in want.items()) + f"; {len(keys) - before} new problems")
    return keys


def rollout_keys(manifest: str | Path, keys: dict[str, set[str]], log=None) -> dict[str, set[str]]:
    """`keys` with an ORL run's rollout prompts (training_draws.rollout_samples) added as 'orl/<task>' draws."""
    before, n = len(keys), 0
    for s in rollout_samples(manifest):
        key = canonical(s.task, s.prompt)
        if key is not None:
            keys.setdefault(key, set()).add(f"orl/{s.task}")
            n += 1
    if log:
        log(f"ORL rollouts ({manifest}): {n} long7xp / prog7xp prompts; {len(keys) - before} new problems")
    return keys


def check_orl_base(orl_manifest: str | Path, base_manifest: str | Path) -> None:
    """Refuses an ORL run whose recorded base weights are not the pretrained checkpoint whose chain is replayed (its
    rollouts would be added to another model's training set)."""
    want = (json.loads(Path(orl_manifest).read_text()).get("recipe") or {}).get("base_weights") or {}
    have = json.loads(Path(base_manifest).read_text()).get("files") or {}
    if not want or any(have.get(k) != v for k, v in want.items()):
        raise SystemExit(f"--orl {orl_manifest}: its base weights ({want or 'not recorded'}) are not those of "
                         f"--manifest {base_manifest}; give the manifest of the base it was trained on")


def in_range(records: list[dict], threshold: float | None = None) -> list[dict]:
    """The FAMILIES' in-range (split 'heldout') records, at `threshold` when given."""
    return [r for r in records if r["task"] in FAMILIES and r.get("split") == "heldout"
            and (threshold is None or r["decode"].get("threshold") == threshold)]


def mark_seen(records: list[dict], keys) -> list[tuple[dict, bool]]:
    """Each record with whether its canonical problem is in `keys` (a set of canonical problems, or
    training_keys's dict)."""
    return [(r, canonical(r["task"], r["prompt"]) in keys) for r in records]


def _acc(recs: list[dict]) -> str:
    return f"{100 * sum(r['verdict'] for r in recs) / len(recs):.1f}%" if recs else "-"


def _curve(r: dict) -> tuple[str, str]:
    return r["model"]["name"], f"{decoder_label(r['decode'])} {r['decode'].get('threshold')}"


def summary_rows(marked: list[tuple[dict, bool]], keys: dict | set = (), by_size: bool = False) -> list[dict]:
    """One row per (model, decoder, family[, size]): n and accuracy on all, clean and seen records (and, when `keys`
    is training_keys's dict, how many seen records were trained only through a helper's draws)."""
    groups: dict[tuple, list[tuple[dict, bool]]] = defaultdict(list)
    for r, seen in marked:
        model, dec = _curve(r)
        groups[(model, dec, r["task"], None)].append((r, seen))
        if by_size:
            groups[(model, dec, r["task"], get_task(r["task"]).size(r["prompt"]))].append((r, seen))
    rows = []
    for (model, dec, family, size), items in sorted(groups.items(), key=lambda kv: (*kv[0][:3], kv[0][3] or 0)):
        clean = [r for r, s in items if not s]
        seen = [r for r, s in items if s]
        helper = sum(1 for r in seen if isinstance(keys, dict)
                     and all(src.split("/")[-1] != r["task"] for src in keys[canonical(r["task"], r["prompt"])]))
        row = {"model": model, "decoder": dec, "family": family}
        if by_size:
            row["size"] = "all" if size is None else size
        row.update({"n": len(items), "acc": _acc([r for r, _ in items]), "n_clean": len(clean),
                    "acc_clean": _acc(clean), "n_seen": len(seen), "acc_seen": _acc(seen)})
        if isinstance(keys, dict):
            row["seen_via_helper"] = helper
        rows.append(row)
    return rows


def paired_rows(marked: list[tuple[dict, bool]], a: str, b: str) -> list[dict]:
    """Per family and both together: A against B on the records both answered, clean ones and all."""
    rows = []
    for family in FAMILIES + ("both",):
        for subset in ("clean", "all"):
            sides = []
            for name in (a, b):
                recs = [(r, s) for r, s in marked if r["model"]["name"] == name
                        and (family == "both" or r["task"] == family) and (subset == "all" or not s)]
                decs = {_curve(r)[1] for r, _ in recs}
                if len(decs) > 1:
                    raise ValueError(f"--paired {name}: records of several decoders {sorted(decs)}; pick one "
                                     "with --threshold")
                sides.append({pair_key(r): r["verdict"] for r, _ in recs})
            n, nb, nc = metrics.paired_counts(*sides)
            shared = sides[0].keys() & sides[1].keys()
            acc = [f"{100 * sum(s[k] for k in shared) / n:.1f}%" if n else "-" for s in sides]
            rows.append({"family": family, "subset": subset, "n_paired": n, f"acc {a}": acc[0], f"acc {b}": acc[1],
                         "b (A only)": nb, "c (B only)": nc, "mcnemar_p": f"{metrics.mcnemar_exact(nb, nc):.3g}"})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", help="orl eval records (.jsonl or .jsonl.gz)")
    ap.add_argument("--paired", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="two model names: McNemar on the clean records both answered (repeatable)")
    ap.add_argument("--threshold", type=float, default=None, help="keep only records decoded at this threshold")
    ap.add_argument("--budget", type=int, default=None,
                    help="the first N draws of each task per stage instead of the recorded steps x mix")
    ap.add_argument("--extra-stage", action="append", default=[], choices=sorted(EXTRA),
                    help="add a later training stage's draws (base7-more: session 52's continuation of the old base; "
                         "the shipped base's own stage since session 54)")
    ap.add_argument("--manifest", default=str(MANIFEST), help="the pretrain manifest whose init chain is replayed")
    ap.add_argument("--orl", default=None, metavar="MANIFEST",
                    help="also an ORL run's rollout prompts (e.g. checkpoints/orl-tiny7-orl/orl.json; its base must be "
                         "--manifest's; --budget does not limit them): 'clean' is then clean for the ORL model too")
    ap.add_argument("--by-size", action="store_true", help="also one row per size")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    args = ap.parse_args(argv)
    table = markdown_table if args.markdown else text_table
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731

    records = in_range(read_records(args.records), args.threshold)
    if not records:
        raise SystemExit(f"no in-range {'/'.join(FAMILIES)} records in {args.records}")
    stages = with_extra(base_stages(args.manifest), args.extra_stage, log)
    keys = training_keys(stages, args.budget, log=log)
    if args.orl:
        check_orl_base(args.orl, args.manifest)
        keys = rollout_keys(args.orl, keys, log)
    log(f"{len(keys)} distinct trained problems: "
        + ", ".join(f"{f} {sum(k.startswith(f + '|') for k in keys)}" for f in FAMILIES))
    marked = mark_seen(records, keys)
    print(f"In-range records, 'seen' = the same problem under any marker run among the training draws of "
          f"{' + '.join(s.name for s in stages)}" + (" + the ORL rollouts" if args.orl else "")
          + (f" (first {args.budget} draws a task per stage)" if args.budget else " (exact draws)"))
    print(table(summary_rows(marked, keys, args.by_size)))
    names = {r["model"]["name"] for r in records}
    for a, b in args.paired:
        missing = [m for m in (a, b) if m not in names]
        if missing:
            print(f"\n--paired {a} {b}: no records of {', '.join(missing)}; known: {', '.join(sorted(names))}")
            continue
        print(f"\nPaired A = {a}, B = {b} (exact McNemar on the discordant pairs):")
        print(table(paired_rows(marked, a, b)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
