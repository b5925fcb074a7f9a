#!/usr/bin/env python
"""In-range vs beyond-the-range accuracy and TPF from `orl eval` records (tasks v7, issue 21).

Evaluate each checkpoint on both splits (the answers beyond long7's range need 112 tokens):

    orl eval --model M --tasks split7,keysort7,prog7,constr7,long7 --split heldout --max-new-tokens 112 --out R.jsonl
    orl eval --model M --tasks split7,keysort7,prog7,constr7,long7 --split beyond  --max-new-tokens 112 --out R.jsonl
    python benchmarks/length_table.py R.jsonl [more.jsonl ...] [--by-size]

One row per (model, decoder, threshold, split, family) plus an "all" row per split (the helper tasks
of tasks/helpers.py and tasks/hint_helpers.py, training-only, are rows of their own and not in "all"): n, accuracy, TPF
as a ratio of sums (all generated tokens up to and including EOS / all forwards), the same without
the EOS token, and the per-sample mean TPF (labelled; not the primary number). --by-size adds one row
per size (digits, records, assignments, letters: orl/eval/tasks/__init__.py). For the long and prog families
the table also gives the shape: answers with the reference's skeleton, and the right values in those.

--paired A B: the two models' accuracy on the prompts both answered, per split and family, with the
exact McNemar p-value (A = a model name as the table prints it, e.g. two runs' `tiny7h/stage1`); the samples only
one of the two answered are left out, and counted under the table.

--values-by VALUE INDEX: the right values of the well-shaped answers, split by element index >= INDEX and
reference value >= VALUE (e.g. `--values-by 100 21` for long7xp: past the range, both grow together; the
split says whether the lost values are unseen numbers or lost positions).

--steps VALUE INDEX (long7x, long7xp; prog7x, prog7xp): each running-sum step judged against the model's own
previous sum (element k right iff it is element k-1 plus digit k), so an early error is not counted again at
every later element; split by element index >= INDEX and the step's target sum >= VALUE. For the prog chains
the same with statement k applied to the model's own value of statement k-1 (e.g. `--steps 50 8`: past
prog7xp's range of 2-7 statements).

--first-errors K: per element index k <= K, the answers whose elements 1..k-1 were all right and how many of
them get element k right (the same judgement as --steps, never after an error, so the splits compare at equal k).
"""
from __future__ import annotations

import argparse
import re
from collections import defaultdict

from orl.eval import metrics
from orl.eval.headline import pair_key
from orl.eval.records import decoder_label, latest_records as latest, read_records
from orl.eval.shape import has_shape, shape_counts, values_by
from orl.eval.tasks import HELPER_NAMES, get_task


def row(recs: list[dict]) -> dict:
    t = metrics.pooled_tpf(recs)  # the one definition of DESIGN section 5
    out = {"n": len(recs), "acc": sum(bool(r["verdict"]) for r in recs) / len(recs),
           "tpf": t["tpf"], "tpf_no_eos": t["tpf_no_eos"], "tpf_mean": t["tpf_sample_mean"], "shape": "-", "values": "-"}
    if all(has_shape(r["task"]) and "output_text" in r for r in recs):  # an "all" row only if every family has one
        shaped, right, total = shape_counts([(r["answer"], r["output_text"]) for r in recs])
        out["shape"], out["values"] = f"{shaped}/{len(recs)}", f"{right}/{total}"
    return out


def head_of(r: dict) -> tuple:
    """(model, decoder, threshold, split): what one table row is about, before the family."""
    return (r["model"].get("name") or r["model"]["id"], decoder_label(r["decode"]), r["decode"].get("threshold", "-"),
            r["split"])


def table(records: list[dict], by_size: bool, by_seed: bool = False) -> list[tuple[tuple, dict]]:
    """Rows per (model, decoder, threshold, split) and family, an "all" row over the families; by_size: a row per
    prompt size too; by_seed: the "all" row per prompt seed too (`orl eval --seed`: the seed spread)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in latest(records):
        head = head_of(r)
        if r["task"] not in HELPER_NAMES:  # training-only helpers are reported per task, never in the mean
            groups[head + ("all",)].append(r)
            if by_seed:
                groups[head + (f"all@seed{r['decode'].get('seed', 0)}",)].append(r)
        groups[head + (r["task"],)].append(r)
        task = get_task(r["task"])
        if by_size and hasattr(task, "size"):
            groups[head + (f"{r['task']}@{task.size(r['prompt'])}",)].append(r)
    return [(k, row(v)) for k, v in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))]


def paired(records: list[dict], a: str, b: str) -> list[tuple[str, str, int, int, int, int, int, float]]:
    """(split, family, n, right in A, right in B, only A, only B, McNemar p) over the samples both models
    answered: same prompt, prompt seed and sample. Each model must have one decoder and threshold here
    (a sweep would pair whichever came last); a prompt evaluated twice counts with its last record. A or B
    may name one decoder of a model as MODEL/DECODER/TAU, e.g. "hint4g2/threshold L16/0.9" or
    "hint4g2/AR +self-draft k8/None" (the decoder label and threshold the summary tables print)."""
    return paired_rows(paired_verdicts(records, a, b), a, b)


def paired_rows(by: dict[str, dict[tuple, bool]], a: str,
                b: str) -> list[tuple[str, str, int, int, int, int, int, float]]:
    """`paired`'s rows from paired_verdicts' verdicts."""
    keys = by[a].keys() & by[b].keys()
    out = []
    for split in sorted({k[0] for k in keys}):
        for fam in sorted({k[1] for k in keys if k[0] == split}) + ["all"]:
            ks = [k for k in keys if k[0] == split and (fam == k[1] or fam == "all" and k[1] not in HELPER_NAMES)]
            n, only_a, only_b = metrics.paired_counts({k: by[a][k] for k in ks}, {k: by[b][k] for k in ks})
            out.append((split, fam, n, sum(by[a][k] for k in ks), sum(by[b][k] for k in ks), only_a, only_b,
                        metrics.mcnemar_exact(only_a, only_b)))
    return out


def paired_verdicts(records: list[dict], a: str, b: str) -> dict[str, dict[tuple, bool]]:
    """{A, B} -> (split, family, prompt id, prompt seed, sample) -> verdict, checked as `paired` describes."""
    if a == b:
        raise SystemExit("--paired: A and B are the same model")
    by: dict[str, dict[tuple, bool]] = {a: {}, b: {}}
    decoders: dict[str, set] = {a: set(), b: set()}
    for r in records:
        dec = (decoder_label(r["decode"]), r["decode"].get("threshold"))
        for m in {r["model"]["name"], f"{r['model']['name']}/{dec[0]}/{dec[1]}"} & by.keys():
            by[m][(r["split"], r["task"], *pair_key(r))] = bool(r["verdict"])  # headline's pairing
            decoders[m].add(dec)
    names = ", ".join(sorted({r["model"]["name"] for r in records}))
    missing = [m for m in (a, b) if not by[m]]
    if missing:
        raise SystemExit(f"--paired: no records of {', '.join(missing)}; the models here are {names}")
    for m in (a, b):
        if len(decoders[m]) > 1:
            raise SystemExit(f"--paired: {m} has records of {len(decoders[m])} decoders or thresholds "
                             f"({sorted(map(str, decoders[m]))}); give files with one each")
    if not by[a].keys() & by[b].keys():
        raise SystemExit(f"--paired: {a} and {b} share no prompt (same prompt, seed and sample)")
    return by


_ITEM, _SUM = re.compile(r"([a-zA-Z])([1-9])"), re.compile(r"([a-zA-Z])([0-9]+)")


def running_steps(prompt: str, output: str) -> list[tuple[int, int, bool]]:
    """(k from 1, the step's target: own previous sum + digit k, right) for a hinted cumsum answer, up to its
    first wrong marker or its end; the prompt may end with the answer's first marker (long7xp). Lenient where
    the exact check is not (separators, leading zeros): it reads the sums, not the format."""
    body, _, first = prompt.partition("=")
    out, prev, steps = first + output, 0, []
    for k, ((mark, digit), (got_mark, got)) in enumerate(zip(_ITEM.findall(body), _SUM.findall(out)), start=1):
        if got_mark != mark:
            break
        steps.append((k, prev + int(digit), int(got) == prev + int(digit)))
        prev = int(got)
    return steps


_STATEMENT = re.compile(r"([a-z])=(?:([a-z])([+-])([0-9])|([0-9])([+-])([a-z])|([0-9]))(?:;|$)")
_VALUE = re.compile(r"([a-z])=(-?[0-9]+)")


def chain_steps(prompt: str, output: str) -> list[tuple[int, int, bool]]:
    """prog_fresh's `running_steps`: (k, statement k applied to the model's own value of statement k-1, right),
    up to the answer's first wrong variable or its end; the prompt may end with the first variable (prog7xp)."""
    body, _, first = prompt[len("echo "):].rpartition(":")
    body = body.rstrip(" ")  # prog7xpf's spaces before the ':'
    values = [_VALUE.fullmatch(v) for v in (first + output).split(",")]
    prev, steps = 0, []
    for k, (st, got) in enumerate(zip(_STATEMENT.findall(body), values), start=1):
        if got is None or got[1] != st[0]:
            break
        _, op, d, d2, op2, _, literal = st[1:]
        target = (int(literal) if literal else prev + int(d) if op == "+" else prev - int(d) if op else
                  int(d2) + prev if op2 == "+" else int(d2) - prev)
        steps.append((k, target, int(got[2]) == target))
        prev = int(got[2])
    return steps


def print_cells(cells: dict[tuple, dict], value_cut: int, index_cut: int, v: str, note: str) -> None:
    """cells: (model, decoder, threshold, split, family) -> {(index >= index_cut, value >= value_cut): (right, total)}."""
    print(f"{'model':<22} {'decoder':<14} {'tau':>5} {'split':<8} {'family':<10} " + " ".join(
        f"{f'k{c1}{index_cut} {v}{c2}{value_cut}':>14}" for c1 in ("<", ">=") for c2 in ("<", ">=")))
    for (model, dec, tau, split, fam), c in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        print(f"{model[-22:]:<22} {dec:<14} {str(tau):>5} {split:<8} {fam:<10} " + " ".join(
            f"{'%d/%d' % tuple(c[(i, w)]) if (i, w) in c else '-':>14}" for i in (False, True) for w in (False, True)))
    print(note)


STEPPERS = {"long7x": running_steps, "long7xp": running_steps, "prog7x": chain_steps, "prog7xp": chain_steps}


def print_steps(records: list[dict], value_cut: int, index_cut: int) -> None:
    cells: dict[tuple, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for r in latest(records):
        if r["task"] in STEPPERS and "output_text" in r:
            for k, target, ok in STEPPERS[r["task"]](r["prompt"], r["output_text"]):
                cell = cells[head_of(r) + (r["task"],)][(k >= index_cut, target >= value_cut)]
                cell[0] += ok
                cell[1] += 1
    print_cells(cells, value_cut, index_cut, "s", "right/total steps, each against the model's own previous value "
                "(long: the running sum; prog: the previous statement's value), up to the answer's first wrong or "
                "missing marker or variable (missing steps are not counted); k = element index (from 1), s = the "
                "step's target value")


def print_first_errors(records: list[dict], last_k: int) -> None:
    """Per element index k: the answers whose steps 1..k-1 were all right, and how many of them get step k right
    too. Unlike --steps this never judges a step that follows an error, so the rows of two splits compare."""
    reached: dict[tuple, list[list[int]]] = defaultdict(lambda: [[0, 0] for _ in range(last_k + 1)])
    for r in latest(records):
        if r["task"] in STEPPERS and "output_text" in r:
            for k, _, ok in STEPPERS[r["task"]](r["prompt"], r["output_text"]):
                if k > last_k:
                    break
                cell = reached[head_of(r) + (r["task"],)][k]
                cell[0] += ok
                cell[1] += 1
                if not ok:
                    break
    print(f"{'model':<22} {'decoder':<14} {'tau':>5} {'split':<8} {'family':<10} "
          + " ".join(f"{f'k={k}':>9}" for k in range(1, last_k + 1)))
    for (model, dec, tau, split, fam), c in sorted(reached.items(), key=lambda kv: tuple(map(str, kv[0]))):
        print(f"{model[-22:]:<22} {dec:<14} {str(tau):>5} {split:<8} {fam:<10} "
              + " ".join(f"{'%d/%d' % tuple(c[k]) if c[k][1] else '-':>9}" for k in range(1, last_k + 1)))
    print("right/reached at element k: answers whose elements 1..k-1 were all right (judged as --steps judges)")


def print_values_by(records: list[dict], value_cut: int, index_cut: int) -> None:
    groups = defaultdict(list)
    for r in latest(records):
        if has_shape(r["task"]) and "output_text" in r:
            groups[head_of(r) + (r["task"],)].append((r["answer"], r["output_text"]))
    print_cells({key: values_by(pairs, value_cut, index_cut) for key, pairs in groups.items()}, value_cut,
                index_cut, "v", "right/total values in the answers with the reference's skeleton; k = element index "
                "(from 1), v = the reference value")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+")
    ap.add_argument("--by-size", action="store_true", help="one row per prompt size as well")
    ap.add_argument("--by-seed", action="store_true", help="the 'all' row per prompt seed as well (the seed spread)")
    ap.add_argument("--paired", nargs=2, metavar=("A", "B"), help="McNemar of model A against model B instead")
    ap.add_argument("--values-by", nargs=2, type=int, metavar=("VALUE", "INDEX"),
                    help="right values of the well-shaped answers by reference value >= VALUE and element index "
                         ">= INDEX, per model, split and family, instead")
    ap.add_argument("--steps", nargs=2, type=int, metavar=("VALUE", "INDEX"),
                    help="running-sum steps of long7x/long7xp (and the prog7x/prog7xp chains) against the model's own "
                         "previous value, instead")
    ap.add_argument("--first-errors", type=int, metavar="K",
                    help="per element index up to K: right / reached among answers right until then, instead")
    args = ap.parse_args()
    if sum(map(bool, (args.paired, args.by_size or args.by_seed, args.steps, args.values_by, args.first_errors))) > 1:
        ap.error("--paired, --by-size / --by-seed, --steps, --values-by and --first-errors: one table at a time")
    if args.first_errors:
        print_first_errors(read_records(args.records), args.first_errors)
        return
    if args.steps:
        print_steps(read_records(args.records), *args.steps)
        return
    if args.values_by:
        print_values_by(read_records(args.records), *args.values_by)
        return
    if args.paired:
        a, b = args.paired
        by = paired_verdicts(read_records(args.records), a, b)
        print(f"{'split':<8} {'family':<14} {'n':>5} {'A right':>8} {'B right':>8} {'only A':>7} {'only B':>7} {'p':>8}")
        for split, fam, n, ra, rb, oa, ob, p in paired_rows(by, a, b):
            print(f"{split:<8} {fam:<14} {n:>5} {ra:>8} {rb:>8} {oa:>7} {ob:>7} {p:>8.2g}")
        print(f"A = {a}, B = {b}; p = exact two-sided McNemar over the prompts only one of them gets right")
        only_a, only_b = len(by[a].keys() - by[b].keys()), len(by[b].keys() - by[a].keys())
        if only_a or only_b:  # the test sees only the pairs: say what it does not see
            print(f"left out: {only_a} samples of A and {only_b} of B have no partner in the other (same split, prompt, "
                  "prompt seed and sample)")
        return
    print(f"{'model':<22} {'decoder':<14} {'tau':>5} {'split':<8} {'family':<14} {'n':>5} {'acc':>6} "
          f"{'TPF':>6} {'noEOS':>6} {'mean*':>6} {'shape':>8} {'values':>9}")
    for (model, dec, tau, split, fam), v in table(read_records(args.records), args.by_size, args.by_seed):
        print(f"{model[-22:]:<22} {dec:<14} {str(tau):>5} {split:<8} {fam:<14} {v['n']:>5} {v['acc']:>6.3f} "
              f"{v['tpf']:>6.2f} {v['tpf_no_eos']:>6.2f} {v['tpf_mean']:>6.2f} {v['shape']:>8} {v['values']:>9}")
    print("TPF = sum of tokens (incl. EOS) / sum of forwards; noEOS without the EOS token; mean* = per-sample mean;\n"
          "shape = answers with the reference's skeleton (numbers as '#': elements and length right whatever the "
          "values; long and prog families), values = right values in those (orl/eval/shape.py)")


if __name__ == "__main__":
    main()
