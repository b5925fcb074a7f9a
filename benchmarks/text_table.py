"""Accuracy and TPF of models on the text families (benchmarks/text_tasks.py), pooled over prompt seeds, with the
paired McNemar test against a baseline model (issue 22 item 4).

    python benchmarks/text_table.py ~/.cache/orl/runs/g55/eval --models ar,conv,orl,no_aec --baseline conv

Reads DIR/{model}-{kind}{seed}.jsonl or .jsonl.gz from the first given DIR that has it (`orl eval` records: kind `seed` = the in-range held-out draw of that seed,
`beyond` = sizes past the training range). One markdown row per (model, threshold, kind): accuracy per family and
pooled, the pooled accuracy's spread over seeds (min-max), TPF as a ratio of sums (every generated token / every
denoising and commit forward; a stopped row's tokens after its stop string are not counted, their forwards are),
mean steps per block, and the difference to the baseline at the same threshold (else at the baseline's threshold
nearest 0.9, named in the cell) with the exact McNemar p over the samples both answered (same seed, prompt, draw).

A second table gives each model's AUP per split (orl.eval.metrics.aup) over its threshold curve: the points are
(pooled TPF, pooled accuracy) at every threshold evaluated on all the requested seeds (a threshold run on fewer seeds
or on part of a seed's questions is left out and named), y_max is the best accuracy of any listed model's threshold
points in that split (AR decoders are not on a threshold curve and do not set it, unlike orl.eval.report, whose
curves include the AR rows: here the compared curves are the dLLMs'), and the spread is the AUP of each seed alone over
the thresholds the pooled curve counts, with the same y_max. The "counted" column names the points d3LLM's drop rule
keeps (more than 5 points below the least parallel point's accuracy: not counted). AUPs compare only between curves
over the same thresholds.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from orl.eval import metrics
from orl.eval.records import decoder_label, latest_records, read_records

FAMILIES = ("copy", "count", "upper", "reverse")


def load(dirs: list[Path], name: str) -> tuple[Path, list[dict]]:
    """The records DIR/name or DIR/name.gz (the form committed under docs/) of the first dir that has them."""
    for d in dirs:
        for p in (d / name, d / (name + ".gz")):
            if p.is_file():
                return p, read_records(p)
    raise SystemExit(f"no records {name}(.gz) in {', '.join(map(str, dirs))}: run `orl eval ... --out DIR/{name}` first")


def groups(dirs: list[Path], model: str, kind: str, seeds: list[int]) -> dict[float | None, list[dict]]:
    """threshold (None for an AR decoder) -> records over all seeds, each tagged with its seed. A prompt evaluated
    twice counts once (its last record); a file holding two models or two decoders at one threshold is refused."""
    out = defaultdict(list)
    for s in seeds:
        path, recs = load(dirs, f"{model}-{kind}{s}.jsonl")
        for r in latest_records(recs):
            if r["task"] not in FAMILIES:
                raise SystemExit(f"{path}: a record of task {r['task']!r}, not one of {', '.join(FAMILIES)}")
            r["_seed"] = s
            out[None if r["decode"].get("rule") == "ar" else r["decode"].get("threshold")].append(r)
    for tau, recs in out.items():
        who = {(r["model"]["id"], decoder_label(r["decode"])) for r in recs}
        if len(who) > 1:
            raise SystemExit(f"{model}-{kind}*: threshold {tau}: records of {len(who)} models / decoders {sorted(who)}")
    return out


def key(r: dict) -> tuple:
    return r["_seed"], r["task"], r["prompt"], r["sample"]


def row(model: str, tau, kind: str, recs: list[dict], base: list[dict] | None, base_tau) -> str:
    verdicts = {f: [r["verdict"] for r in recs if r["task"] == f] for f in FAMILIES}
    per_seed = defaultdict(list)
    for r in recs:
        per_seed[r["_seed"]].append(r["verdict"])
    spread = [100 * metrics.accuracy(v) for v in per_seed.values()]
    steps = [s for r in recs for s in r.get("block_steps") or []]
    tpf = metrics.pooled_tpf(recs)["tpf"]
    cells = [model, "AR" if tau is None else f"{tau:g}", kind,
             *(f"{100 * metrics.accuracy(v):.1f}" if v else "-" for v in verdicts.values()),
             f"**{100 * metrics.accuracy([r['verdict'] for r in recs]):.1f}** ({min(spread):.0f}-{max(spread):.0f})",
             f"{tpf:.2f}", f"{metrics.mean(steps):.2f}" if steps else "-"]
    n, b, c = metrics.paired_counts({key(r): r["verdict"] for r in recs}, {key(r): r["verdict"] for r in base or []})
    if not n:
        cells.append("-")
    else:
        at = "AR" if base_tau is None else f"{base_tau:g}"
        cells.append(f"at {at}: {100 * (b - c) / n:+.1f} pts, {b} vs {c}, p = {metrics.mcnemar_exact(b, c):.2g} (n = {n})")
    return "| " + " | ".join(cells) + " |"


def curve(recs: list[dict]) -> tuple[float, float]:
    """(TPF as a ratio of sums, accuracy as a fraction) of one threshold's records."""
    return metrics.pooled_tpf(recs)["tpf"], metrics.accuracy([r["verdict"] for r in recs])


def aup_table(dirs: list[Path], models: list[str], kinds: list[str], seeds: list[int]) -> list[str]:
    lines = ["| model | split | thresholds | counted (5-point drop rule) | AUP (seed min-max) | points (threshold: TPF, acc %) "
             "| left out (not on every seed's full question set) |", "|---|---|---|---|---:|---|---|"]
    for kind in kinds:
        by_model = {m: {t: r for t, r in groups(dirs, m, kind, seeds).items() if t is not None} for m in models}
        # a seed's full question set: every (task, prompt, sample) any listed model answered at any threshold there
        qs = defaultdict(set)
        for by_tau in by_model.values():
            for recs in by_tau.values():
                for r in recs:
                    qs[r["_seed"]].add(key(r))
        curves, missing = {}, {}
        for model, by_tau in by_model.items():
            full = {t: r for t, r in by_tau.items()
                    if all({key(x) for x in r if x["_seed"] == s} == qs[s] for s in seeds)}
            missing[model] = sorted(set(by_tau) - set(full))
            curves[model] = full
        y_max = max((curve(r)[1] for c in curves.values() for r in c.values()), default=0.0)
        for model, c in curves.items():
            split = "in range" if kind == "seed" else kind
            left = ",".join(f"{t:g}" for t in missing[model]) or "-"
            if not c:
                lines.append(f"| {model} | {split} | - | - | no threshold curve | - | {left} |")
                continue
            taus = sorted(c)
            pts = {t: curve(c[t]) for t in taus}
            counted = metrics.aup_counted([pts[t][0] for t in taus], [pts[t][1] for t in taus])
            kept = [t for t, c in zip(taus, counted) if c]
            whole = metrics.aup([pts[t][0] for t in taus], [pts[t][1] for t in taus], y_max=y_max)
            per_seed = []  # each seed over the pooled curve's counted thresholds (no drop rule of its own)
            for s in seeds:
                sp = [curve([x for x in c[t] if x["_seed"] == s]) for t in kept]
                per_seed.append(metrics.aup([p[0] for p in sp], [p[1] for p in sp], y_max=y_max, max_drop=float("inf")))
            lines.append(f"| {model} | {split} | {','.join(f'{t:g}' for t in taus)} | {','.join(f'{t:g}' for t in kept)} | "
                         f"**{whole:.1f}** ({min(per_seed):.1f}-{max(per_seed):.1f}) | "
                         + "; ".join(f"{t:g}: {pts[t][0]:.2f}, {100 * pts[t][1]:.1f}" for t in taus) + f" | {left} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", type=Path, nargs="+", help="record directories, searched in order for each file")
    ap.add_argument("--models", required=True, help="comma-separated record-file prefixes")
    ap.add_argument("--baseline", help="the prefix the others are compared with")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--kinds", default="seed,beyond")
    ap.add_argument("--aup", action="store_true", help="also the AUP table over each model's threshold curve")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| model | threshold | split | " + " | ".join(FAMILIES) + " | all % (seed min-max) | TPF | steps/block | "
          f"vs {args.baseline or '-'} (right only here vs only there) |")
    print("|---|---|---|" + "---:|" * (len(FAMILIES) + 4))
    for kind in args.kinds.split(","):
        base = groups(args.dirs, args.baseline, kind, seeds) if args.baseline else {}
        for model in args.models.split(","):
            for tau, recs in sorted(groups(args.dirs, model, kind, seeds).items(), key=lambda t: -(t[0] or 2)):
                # the baseline at the same threshold; an AR model (or a threshold the baseline lacks) against the
                # baseline's nearest to 0.9, named in the cell
                at = tau if tau in base else min(base, key=lambda t: abs((t or 0.9) - 0.9), default=None)
                ref = base.get(at) if model != args.baseline else None
                print(row(model, tau, "in range" if kind == "seed" else kind, recs, ref, at))
    if args.aup:
        print()
        print("\n".join(aup_table(args.dirs, args.models.split(","), args.kinds.split(","), seeds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
