#!/usr/bin/env python
"""In-range accuracy of long7xp and prog7xp split into problems the shipped tiny7 base trained on under other
markers ("seen") and problems it never trained on ("clean"), from `orl eval` records.

Why: long7xp and prog7xp (orl/eval/tasks/hinted.py) split train / held-out by hashing the prompt WITH its markers,
so a held-out prompt with its marker run shifted is often a training prompt (tests/test_tasks_marker_split.py,
docs/TASKS.md). Their in-range ("heldout") accuracy is then partly on problems the model was trained on. split7xp,
constr7xp and keysort7x are not affected (their `canonical` drops the markers); `beyond` is not (sizes never trained).

    python benchmarks/heldout_leak.py RECORDS.jsonl[.gz] [...] [--paired A B] [--threshold 0.9] [--by-size]
        [--budget N] [--extra-stage base7-more] [--manifest checkpoints/orl-tiny7-base/orl.json] [--markdown]

What "the same problem" is: `canonical` renames a prompt's marker run to start at the alphabet's first marker
(each marker replaced by its rank in the run: `echo h=8;i=h-0;j=i+8:h` and `echo c=8;d=c-0;e=d+8:c` both become
`echo a=8;b=a-0;c=b+8:a`; long7xp's markers rank over a-zA-Z, prog7xp's over a-z), so two prompts that differ only by
their marker run compare equal. The helpers long7xpf and prog7xpf are the family's own prompt with spaces before the
`=` / `:`: with the spaces dropped a draw of theirs is the same problem, and is counted as seen too (the source is
reported). long7xpo counts at offset 0 only (`cumsum+0:` is long7xp's problem); no shipped recipe trains it.

How "seen" is decided: EXACT DRAWS, not a bound. orl/train/pretrain.py's `make_batches` draws step s's rows from
`random.Random(f"pretrain|{seed}|{s}")`: for each task of the config in order, `mix[i]` indices
`rng.randrange(1 << 30)` (a task with mix 0 draws none), each sampled as `get_task(name).sample("train", index)`,
with a fixed mix (`balance` empty in every stage here; a balanced mix would depend on losses and is refused).
`training_keys` replays that stream (the index loop, three lines, checked against `make_batches` itself by
tests/test_heldout_leak.py) and calls the project's own `Task.sample` for every draw of the tasks above (~20 s on
one CPU thread for the shipped chain).

Stages (the init chain of checkpoints/orl-tiny7-base):
  1. hint4st-7k-s2: the two-family AR stage (7,000 steps, seed 2, long7xp, prog7xp, long7xph, prog7xph, long7xpf at
     12, 12, 6, 6, 6 rows). Its manifest is not shipped (it lives in ~/.cache/orl/runs, not read here): the config is
     the documented command of docs/results-lengths/s39/launch39.sh and docs/TRAINING.md ("Length-varied trio",
     step 1), preset tiny_base7h, whose `init` is empty (a random init: the chain ends there).
  2. five7w-s2d0, the base shipped until session 54 (checkpoints/orl-tiny7-base at git a2a43e7, its `init` above):
     RECORDED from that manifest (tasks, mix, seed 2; 6,000 steps, 3,000 AR + 3,000 diffusion, one seeded stream
     from step 0; its AR half is the five7w-s2 run it was copied from).
  3. the shipped base itself (base7-more since session 54): read from the manifest (recipe.config: tasks, mix, seed
     12; recipe.step 1,500 steps: docs/results-lengths/s52/more.sh), which names stage 2 as `init`
     checkpoints/orl-tiny7-base with `init_git_commit` a2a43e7.
  --extra-stage base7-more adds stage 3 to a chain without it (a `--manifest` of the old base: `git show
  a2a43e7:checkpoints/orl-tiny7-base/orl.json`); with the shipped base it is there already and not replayed twice.
  Not included: the ORL stage's rollout prompts (orl/train/rollout.py `sample_prompts`; the shipped ORL model trained
  on them with reference relabelling), so for orl-tiny7-orl "clean" means clean for its base.

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
import random
import re
import string
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from orl.eval import metrics
from orl.eval.headline import pair_key
from orl.eval.records import decoder_label, read_records
from orl.eval.tables import markdown_table, text_table
from orl.eval.tasks import get_task
from orl.eval.tasks.hinted import MARKERS

FAMILIES = ("long7xp", "prog7xp")  # the families whose held-out split hashes the markers (in-range records only)
# training tasks whose draws pose a FAMILIES problem: task -> the family whose problem it is
PROBLEM_OF = {"long7xp": "long7xp", "long7xpf": "long7xp", "long7xpo": "long7xp",
              "prog7xp": "prog7xp", "prog7xpf": "prog7xp"}
ALPHABET = {"long7xp": MARKERS, "prog7xp": string.ascii_lowercase}
_LONG = re.compile(r"cumsum(\+0)?:((?:[a-zA-Z][1-9])+) *=([a-zA-Z])")
_PROG = re.compile(r"echo ([a-z]=[^:]*?) *:([a-z])")
ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "checkpoints" / "orl-tiny7-base" / "orl.json"


@dataclass(frozen=True)
class Stage:
    name: str
    tasks: tuple[str, ...]
    mix: tuple[int, ...]
    seed: int
    steps: int
    source: str
    init: str = ""  # the stage it started from (a key of RECORDED), "" for a random init


BASE_TASKS = ("long7xp", "prog7xp", "split7xp", "constr7xp", "keysort7x", "long7xph", "prog7xph", "long7xpf",
              "split7xps", "split7xpc", "constr7xph", "keysort7xh")
BASE_MIX = (8, 8, 8, 8, 8, 4, 4, 4, 2, 2, 4, 4)
# stages whose manifests are not in this checkout, by the `init` that names them: a run name (the basename of an
# `init`), or for a shipped checkpoint since replaced "NAME@COMMIT" (its manifest's `init_git_commit`)
RECORDED = {
    "hint4st-7k-s2": Stage("hint4st-7k-s2", ("long7xp", "prog7xp", "long7xph", "prog7xph", "long7xpf"),
                           (12, 12, 6, 6, 6), 2, 7000, "docs/results-lengths/s39/launch39.sh (init: none)"),
    # the base shipped until session 54 (3,000 AR + 3,000 diffusion steps, one stream), which the shipped base continued
    "orl-tiny7-base@a2a43e7": Stage("five7w-s2d0", BASE_TASKS, BASE_MIX, 2, 6000,
                                    "checkpoints/orl-tiny7-base at git a2a43e7", init="hint4st-7k-s2"),
}
EXTRA = {  # session 52's continuation of the old base, shipped as checkpoints/orl-tiny7-base since session 54
    "base7-more": Stage("base7-more", BASE_TASKS, BASE_MIX, 12, 1500,
                        "docs/results-lengths/s52/more.sh (init: checkpoints/orl-tiny7-base at git a2a43e7)"),
}


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


def stage_indices(stage: Stage, want: dict[str, int]):
    """(task, training index) of `stage`'s draws, in orl.train.pretrain.make_batches order, for the tasks in `want`,
    the first want[task] of each; the other tasks' indices are drawn (the stream is shared) and skipped."""
    got = dict.fromkeys(want, 0)
    step = 0
    while any(got[t] < want[t] for t in want):
        rng = random.Random(f"pretrain|{stage.seed}|{step}")  # = make_batches's
        for name, n in zip(stage.tasks, stage.mix):
            if n == 0:
                continue  # make_batches draws nothing for a task that is off
            for index in [rng.randrange(1 << 30) for _ in range(n)]:
                if name in want and got[name] < want[name]:
                    got[name] += 1
                    yield name, index
        step += 1


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


def base_stages(manifest: str | Path = MANIFEST) -> list[Stage]:
    """The init chain of a pretrained checkpoint, oldest first: its own stage from its manifest, then each `init`
    from RECORDED (an unknown init is an error: its draws would be missing)."""
    data = json.loads(Path(manifest).read_text())
    recipe = data["recipe"]
    cfg = recipe["config"]
    if recipe.get("name") != "pretrain":
        raise ValueError(f"{manifest}: recipe {recipe.get('name')!r}, not a pretrain manifest")
    if cfg.get("balance"):
        raise ValueError(f"{manifest}: a balanced mix (rows per task follow the losses); its draws are not replayable")
    mix = tuple(cfg["mix"]) if cfg.get("mix") else None
    if mix is None:
        k, r = divmod(cfg["batch_size"], len(cfg["tasks"]))
        mix = tuple(k + (i < r) for i in range(len(cfg["tasks"])))
    steps = recipe.get("step") or cfg["ar_steps"] + cfg["diffusion_steps"]
    stages = [Stage(Path(manifest).parent.name, tuple(cfg["tasks"]), mix, cfg["seed"], steps, str(manifest))]
    init = cfg.get("init") or ""
    key = Path(init).name + (f"@{recipe['init_git_commit']}" if recipe.get("init_git_commit") else "")
    while init:
        if key not in RECORDED:
            raise ValueError(f"init {init!r} ({key}): no recorded config for this stage; its draws are unknown")
        stages.insert(0, RECORDED[key])
        init = key = RECORDED[key].init
    return stages


def with_extra(stages: list[Stage], extra: list[str], log=None) -> list[Stage]:
    """`stages` and the EXTRA stages named, each once: one already in the chain (base7-more is the shipped base's own
    stage since session 54) is not replayed twice."""
    out = list(stages)
    for name in extra:
        stage = EXTRA[name]
        same = [s for s in out if (s.tasks, s.mix, s.seed, s.steps) == (stage.tasks, stage.mix, stage.seed, stage.steps)]
        if same:
            if log:
                log(f"--extra-stage {name}: already in the chain as {same[0].name}")
            continue
        out.append(stage)
    return out


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
    log(f"{len(keys)} distinct trained problems: "
        + ", ".join(f"{f} {sum(k.startswith(f + '|') for k in keys)}" for f in FAMILIES))
    marked = mark_seen(records, keys)
    print(f"In-range records, 'seen' = the same problem under any marker run among the training draws of "
          f"{' + '.join(s.name for s in stages)}" + (f" (first {args.budget} draws a task per stage)" if args.budget
                                                       else " (exact draws)"))
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
