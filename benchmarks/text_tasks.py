"""Verifiable text families a 270M pretrained LM can answer 3-shot (issue 22 item 4): copy, count, upper,
reverse. Writes one data task per family (orl/eval/tasks/datafile.py), which `orl eval --tasks-file
NAME=FILE` and `orl train --recipe orl --tasks-file NAME=FILE` read.

    python benchmarks/text_tasks.py --out-dir runs/text4 --train 512 --heldout 100 --seed 0

Why these: the v7 families in text are 0-5% for gemma-3-270m and its conversions (docs/RESULTS-gemma.md),
so ORL there keeps almost no rollouts. These four are within a small LM's reach in-context (copying, a
counting run, case mapping, word order; gemma-3-270m 3-shot: 100 / 38 / 42 / 30% on 40 held-out rows each, and
0% on 1-3 digit sums, which were dropped), their answers are several tokens long (TPF has room),
and each has one right answer, checked exactly. Sizes (words, numbers) are drawn from a
training range; `--beyond` draws held-out rows past it, so a length skill is measured, not assumed.

Every prompt carries 3 solved examples (one per line, in-range sizes, from the train stream) and ends with
" =", the answer is the rest of the line with its leading space, and rows stop at "\\n". Rows are a pure
function of (family, split, seed, index); a problem is used once a file, and a held-out row whose problem is
one of the first 4,096 train draws is skipped (more train rows than those draws give are refused).
Known limits, none of which reaches a loss term of ORL (it trains on answers, never on prompt tokens): the
examples come from their own stream, so a held-out question can be an example inside a train prompt (31 of
100 `count` questions at 512 train rows); and held-out seeds are drawn independently, so the validation seed
100 shares 8 of 100 `count` questions with test seed 0 (other examples around them).
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = ("apple river stone cloud green paper light table water house bread music chair night grass "
         "glass plant smile train horse money sugar dream field ocean queen tiger lemon flame storm "
         "heart candle bridge window garden pencil forest silver market winter yellow orange rabbit "
         "rocket castle planet mirror basket island button kitten pocket shadow spring summer autumn "
         "butter copper dinner doctor engine farmer finger flower friend hammer ladder letter monkey "
         "needle oyster parrot pepper pillow prince puzzle ribbon saddle sailor shovel singer spider "
         "square stream street tunnel valley violin wallet whale zebra brick coral crown daisy eagle "
         "fence ghost honey igloo jelly knife lilac maple noble olive piano quilt radar salad tulip "
         "unity vapor wheat yacht blue red gold iron salt milk rain snow wind moon star tree leaf "
         "bird fish frog wolf bear duck lamp door road ship book coin ring bell drum kite nest rope").split()

# family -> (training size range, beyond size range); size = words / numbers / words / words
SIZES = {"copy": ((3, 8), (10, 14)), "count": ((3, 8), (10, 14)), "upper": ((2, 5), (7, 9)),
         "reverse": ((2, 4), (6, 8))}
FAMILIES = tuple(SIZES)


def problem(family: str, rng: random.Random, size: int) -> tuple[str, str]:
    """(prompt line without " =", answer with its leading space) of one problem of this size."""
    if family == "copy":
        words = " ".join(rng.choice(WORDS) for _ in range(size))
        return f"copy: {words}", f" {words}"
    if family == "count":
        start = rng.randint(1, 899)
        return f"count {start} to {start + size - 1}", " " + " ".join(str(start + i) for i in range(size))
    if family == "upper":
        words = " ".join(rng.choice(WORDS) for _ in range(size))
        return f"upper: {words}", f" {words.upper()}"
    if family == "reverse":
        words = [rng.choice(WORDS) for _ in range(size)]
        return f"reverse: {' '.join(words)}", " " + " ".join(reversed(words))
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def draw(family: str, stream: str, index: int, sizes: tuple[int, int]) -> tuple[str, str, int]:
    rng = random.Random(f"text_tasks:{family}:{stream}:{index}")
    size = rng.randint(*sizes)
    return (*problem(family, rng, size), size)


def rows(family: str, split: str, n: int, seed: int = 0, beyond: bool = False, shots: int = 3) -> list[dict]:
    """n rows of one family. Train rows come from one fixed stream (seed ignored); held-out rows from the
    stream of `seed`, skipping any problem that is also one of the first `n_train_guard` train problems."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, not {split!r}")
    if beyond and split == "train":
        raise ValueError("beyond sizes are for held-out rows only")
    in_range, past = SIZES[family]
    train_seen = {draw(family, "train", i, in_range)[0] for i in range(N_TRAIN_GUARD)}
    stream = "train" if split == "train" else f"heldout{'-beyond' if beyond else ''}:{seed}"
    out, i, lines = [], 0, set()
    while len(out) < n:
        if i >= 50 * n + 1000:
            raise ValueError(f"{family}: only {len(out)} of {n} {split} rows differ from the train problems")
        if split == "train" and i >= N_TRAIN_GUARD:  # held-out rows are checked against these draws only
            raise ValueError(f"{family}: {n} train rows need more than the first {N_TRAIN_GUARD} train draws "
                             f"(repeated problems are skipped); ask for fewer")
        line, answer, size = draw(family, stream, i, past if beyond else in_range)
        shot_rng = random.Random(f"text_tasks:{family}:shots:{stream}:{i}")
        i += 1
        if split == "heldout" and line in train_seen or line in lines:
            continue
        lines.add(line)
        examples = []
        while len(examples) < shots:   # an example equal to the question would give its answer away
            example = draw(family, "shots", shot_rng.randrange(10**9), in_range)[:2]
            if example[0] != line:
                examples.append(example)
        context = "".join(f"{q} ={a}\n" for q, a in examples)
        out.append({"prompt": f"{context}{line} =", "answers": [answer, answer.lstrip()], "split": split,
                    "stop": "\n", "meta": {"family": family, "size": size, "beyond": beyond, "seed": seed}})
    return out


N_TRAIN_GUARD = 4096   # train problems a held-out row must differ from (>= any --train used)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--train", type=int, default=512, help="train rows a family (ORL rollout prompts)")
    ap.add_argument("--heldout", type=int, default=100, help="held-out rows a family")
    ap.add_argument("--seed", type=int, default=0, help="the held-out draw (test: 0-2, validation: 100-101)")
    ap.add_argument("--beyond", action="store_true", help="held-out rows past the training sizes (no train rows)")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for family in args.families.split(","):
        if family not in SIZES:
            raise SystemExit(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
        try:
            data = rows(family, "heldout", args.heldout, args.seed, beyond=args.beyond)
            if not args.beyond:
                data = rows(family, "train", args.train) + data
        except ValueError as e:
            raise SystemExit(str(e)) from None
        path = out / f"{family}.jsonl"
        if path.exists():
            raise SystemExit(f"{path} exists; refusing to overwrite it (choose another --out-dir)")
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        print(f"{path}: {len(data)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
