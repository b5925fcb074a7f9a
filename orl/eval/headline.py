"""The headline comparison `orl report` opens with: a reference (model, decoder) against every other
one, on the samples both evaluated (same prompt, prompt seed and draw), per task family and pooled.

Per family: accuracy of each, the difference in points, the exact McNemar p-value of that difference
(metrics.mcnemar_exact over the prompts only one of the two gets right), and each side's TPF as a
ratio of sums with its spread over prompt seeds (min / median / max of the per-seed TPF). A prompt
seed is `orl eval --seed S` (it picks the prompts and seeds the decoder; records keep it in
decode.seed). Headline numbers need >= 3 seeds; fewer are shown, with a warning.
"""
from __future__ import annotations

from collections import defaultdict

from orl.eval import metrics
from orl.eval.records import decoder_label
from orl.eval.tables import text_table

MIN_SEEDS = 3
Curve = tuple[str, str]  # (model name, decoder label)


def curve_of(r: dict) -> Curve:
    return r["model"]["name"], decoder_label(r["decode"])


def seed_of(r: dict) -> int:
    return r["decode"].get("seed", 0)


def reads_seed(decode: dict) -> bool:
    """Whether the recorded decoder's answer depends on its seed (DecodeConfig / ARConfig / CanvasConfig.draws,
    read off the record; tests/test_stats_fixed_prompts.py keeps them equal): sampled tokens, alg_temp's
    positions, 'random' scores, or a canvas decode (it always samples)."""
    return ((decode.get("temperature") or 0) > 0 or (decode.get("alg_temp") or 0) > 0
            or decode.get("confidence") == "random" or "max_denoising_steps" in decode)


def pair_key(r: dict) -> tuple:
    """One sample: (prompt id, which prompt, draw). Which prompt is its text when the decoder ignores its seed:
    a task whose prompts the seed does not pick (HumanEval, a data file) decoded greedily gives the same sample
    under every prompt seed, and counting it once per seed would shrink McNemar's p (3 seeds: a discordant prompt
    counted 3 times). Else (sampling, or a record without its prompt) the prompt seed."""
    if reads_seed(r["decode"]) or r.get("prompt") is None:
        return r["prompt_id"], ("seed", seed_of(r)), r["sample"]
    return r["prompt_id"], ("prompt", r["prompt"]), r["sample"]


def _nearest(taus: set, want: float) -> float | None:
    taus = {t for t in taus if t is not None}
    return min(taus, key=lambda t: (abs(t - want), -t)) if taus else None


def _pick(ref: set, other: set, want: float) -> tuple[float | None, float | None] | None:
    """The (reference, other) thresholds to compare at: the shared one nearest `want`; a decoder without
    a threshold (AR, None) meets the other side's point nearest `want`. None: nothing comparable."""
    if None in ref or None in other:
        a = None if None in ref else _nearest(ref, want)
        b = None if None in other else _nearest(other, want)
        return a, b
    tau = _nearest(ref & other, want)
    return None if tau is None else (tau, tau)


def _side(recs: list[dict]) -> dict:
    by_seed: dict[int, list[dict]] = defaultdict(list)
    for r in recs:
        by_seed[seed_of(r)].append(r)
    return {"accuracy": metrics.accuracy([r["verdict"] for r in recs]), **metrics.pooled_tpf(recs),
            "spread": metrics.seed_spread([metrics.pooled_tpf(v)["tpf"] for v in by_seed.values()])}


def compare(records: list[dict], baseline: str | None = None, threshold: float = 0.9) -> list[dict]:
    """One block per non-reference curve: {"a", "b", "thresholds" (A, B), "seeds", "unpaired", "rows"}; rows are
    per family (sorted) and "all", each with n, accuracy / TPF / spread per side, diff, b, c, p."""
    points: dict[Curve, dict] = {}
    for r in records:
        points.setdefault(curve_of(r), {}).setdefault(r["decode"].get("threshold"), []).append(r)
    if baseline is not None and baseline not in {m for m, _ in points}:
        raise ValueError(f"--baseline {baseline!r} is not a model of these records; they hold "
                         f"{sorted({m for m, _ in points})}")
    ref = next(c for c in points if baseline is None or c[0] == baseline)
    out = []
    for cur in (c for c in points if c != ref):
        taus = _pick(set(points[ref]), set(points[cur]), threshold)
        if taus is None:
            continue
        a = {pair_key(r): r for r in points[ref][taus[0]]}
        b = {pair_key(r): r for r in points[cur][taus[1]]}
        keys = a.keys() & b.keys()
        if not keys:
            continue
        families = sorted({a[k]["task"] for k in keys})
        rows = []
        for fam in [*families, "all"]:
            ks = [k for k in keys if fam == "all" or a[k]["task"] == fam]
            n, only_a, only_b = metrics.paired_counts({k: a[k]["verdict"] for k in ks}, {k: b[k]["verdict"] for k in ks})
            sa, sb = _side([a[k] for k in ks]), _side([b[k] for k in ks])
            rows.append({"task": fam, "n": n, "a": sa, "b": sb, "diff": sb["accuracy"] - sa["accuracy"],
                         "only_a": only_a, "only_b": only_b, "p": metrics.mcnemar_exact(only_a, only_b)})
        repeats = len(points[ref][taus[0]]) + len(points[cur][taus[1]]) - len(a) - len(b)
        out.append({"a": ref, "b": cur, "thresholds": taus, "seeds": sorted({seed_of(a[k]) for k in keys}),
                    "unpaired": len(a.keys() ^ b.keys()), "repeats": repeats, "rows": rows})
    return out


def _p(p: float) -> str:
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.1e}"


def _tpf(side: dict) -> str:
    lo, med, hi = side["spread"]
    return f"{side['tpf']:.2f} ({lo:.2f}/{med:.2f}/{hi:.2f})"


def block_rows(block: dict) -> list[dict]:
    return [{"family": r["task"], "n": r["n"], "acc % A": f"{100 * r['a']['accuracy']:.1f}",
             "acc % B": f"{100 * r['b']['accuracy']:.1f}", "B - A pts": f"{100 * r['diff']:+.1f}",
             "b / c": f"{r['only_a']} / {r['only_b']}", "McNemar p": _p(r["p"]),
             "TPF A (seeds min/med/max)": _tpf(r["a"]), "TPF B (seeds min/med/max)": _tpf(r["b"]),
             "TPF B / A": f"x{r['b']['tpf'] / r['a']['tpf']:.2f}",
             "noEOS A": f"{r['a']['tpf_no_eos']:.2f}", "noEOS B": f"{r['b']['tpf_no_eos']:.2f}"} for r in block["rows"]]


def block_notes(block: dict) -> list[str]:
    name = lambda c: f"{c[0]} / {c[1]}"  # noqa: E731
    seeds = block["seeds"]
    tau = lambda t: "-" if t is None else f"{t:g}"  # noqa: E731
    out = [f"A = {name(block['a'])} at tau {tau(block['thresholds'][0])}, B = {name(block['b'])} at tau "
           f"{tau(block['thresholds'][1])}; "
           f"{block['rows'][-1]['n']} paired samples (same prompt, prompt seed and draw) over prompt seeds "
           f"{', '.join(map(str, seeds))}."]
    if len(seeds) < MIN_SEEDS:
        out.append(f"WARNING: {len(seeds)} prompt seed(s); headline numbers need >= {MIN_SEEDS} "
                   "(orl eval --seed 0, 1 and 2 for both models on the same tasks and limit).")
    if block["unpaired"]:
        out.append(f"{block['unpaired']} samples evaluated by only one of A and B are left out.")
    if block.get("repeats"):
        out.append(f"{block['repeats']} records repeat a sample already counted (the same prompt and draw under "
                   "another prompt seed, with a decoder that ignores its seed: a task whose prompts the seed does "
                   "not pick) and count once; more prompt seeds add no prompts to such a task.")
    out.append("b / c = prompts only A / only B gets right; McNemar p = exact two-sided binomial test of b against "
               "b + c (a paired test: both decoded the same prompts). TPF = all tokens incl. EOS / all forwards "
               "(denoising + commit) over the paired samples; in brackets the same per prompt seed.")
    if any(r[s]["tpf"] < 1 for r in block["rows"] for s in "ab"):
        out.append("TPF < 1: commit forwards count as forwards (one between blocks unless fused into the next "
                   "block's first step), so about one token per denoising step ends below 1.")
    return out


def headline_text(blocks: list[dict]) -> str:
    if not blocks:
        return ("Headline: nothing to compare (one model/decoder, or no shared threshold and samples); "
                "evaluate two models on the same prompts: orl eval --seed 0/1/2 for each.")
    parts = []
    for blk in blocks:
        parts.append("\n".join([f"Headline: {blk['b'][0]} vs {blk['a'][0]}", text_table(block_rows(blk)),
                                *block_notes(blk)]))
    return "\n\n".join(parts)
