"""Every evaluation metric of DESIGN section 5, defined here once. Records store the per-sample values
computed by these functions; tables, plots and the CLI summary aggregate them with `summarize`.

Formulas
- TPF = n_tokens / (step_forwards + commit_forwards), n_tokens counting generated tokens up to and
  including the first EOS; prefill is not a forward here. Over a set of samples TPF is a ratio of
  sums, sum(n_tokens) / sum(forwards) (`pooled_tpf`), never the mean of per-sample ratios (which
  over-weights short answers); the EOS-free TPF drops each finished sample's EOS token from the
  numerator. Commit forwards count, so one token per denoising step gives TPF < 1.
- TPF ceiling over a set: sum(n_tokens) / sum(blocks + commit forwards), the best any block decoder could do
  on the same outputs (one denoising forward per block, plus the decode's commit forwards between blocks:
  2 * blocks - 1 unfused, blocks fused).
- tokens/s = n_tokens / wall seconds from request start to the row's last token (warm-up excluded by
  the runner).
- accuracy = fraction of samples the verifier accepts (pass@1 when there is one sample per prompt).
- pass@k (Chen et al. 2021, unbiased): 1 - C(n-c, k) / C(n, k) for n samples of which c pass,
  computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms the huge binomials.
- AUP (accuracy under parallelism, d3LLM): with the curve's points sorted by TPF rho_1 < ... < rho_m and
  accuracies y_i in percent, points with y_i < y_1 - max_drop are dropped, then
      AUP = rho_1 * y_1 + sum_{i>=2} (rho_i - rho_{i-1}) * (y_i W(y_i) + y_{i-1} W(y_{i-1})) / 2,
      W(y) = min(exp(-alpha * (1 - y / y_max)), 1),  alpha = 3,  max_drop = 5 points,
  where y_max is the best accuracy among the compared curves (default: this curve's). The first term
  credits the least parallel point as a rectangle from TPF 0; W discounts accuracy lost to parallelism.
- McNemar exact test (paired outcomes of two systems on the same prompts): with b prompts only the
  first system gets right and c only the second, p = min(1, 2 * sum_{i<=min(b,c)} C(b+c, i) / 2^(b+c)),
  the two-sided binomial test of b against Binomial(b + c, 1/2); p = 1 when b + c = 0.
- Seed spread: min / median / max of a per-seed value (e.g. TPF over each prompt seed's samples).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

LATENCY_QUANTILES = (50, 90, 99)
PASS_KS = (1, 2, 5, 10, 100)


def tpf(n_tokens: int, step_forwards: int, commit_forwards: int) -> float:
    """step_forwards: denoising steps (dLLM) or decode steps (AR)."""
    forwards = step_forwards + commit_forwards
    if forwards <= 0:
        raise ValueError(f"TPF needs at least one denoising or commit forward, got {forwards}")
    return n_tokens / forwards


def tpf_ceiling(n_tokens: int, n_blocks: int, fused: bool = False) -> float:
    """The highest TPF any block decoder can reach on this output: one denoising forward per block and
    one commit forward between blocks (DESIGN section 5), none with the fused commit forward (it is the
    next block's first step). Short answers cap the possible speed-up."""
    if n_blocks <= 0:
        raise ValueError(f"TPF ceiling needs at least one block, got {n_blocks}")
    return n_tokens / (n_blocks if fused else 2 * n_blocks - 1)


def pooled_tpf(records: Iterable[dict]) -> dict[str, float]:
    """TPF of a set of records (each with n_tokens, finished and forwards {step, commit}) as a ratio of
    sums: tpf (tokens incl. EOS / forwards), tpf_no_eos (without the EOS tokens), and the per-sample
    mean tpf_sample_mean, which is not the TPF of the set and is only shown labelled as such."""
    recs = list(records)
    if not recs:
        raise ValueError("TPF of no records")
    tokens = sum(r["n_tokens"] for r in recs)
    # a sample that finished ends with its EOS, unless a stop string ended it (its last token is text)
    eos = sum(1 for r in recs if r["finished"] and not r.get("stop"))
    fwd = [r["forwards"]["step"] + r["forwards"]["commit"] for r in recs]
    # a sample may cost no forward of its own (Fast-dLLM v2 reads a block's first token off the forward before
    # it: a one-token answer is the prefill's); its tokens still count in the set's ratio of sums
    if min(fwd) < 0 or sum(fwd) <= 0:
        raise ValueError("TPF needs at least one denoising or commit forward over the records (none negative)")
    return {"tpf": tokens / sum(fwd), "tpf_no_eos": (tokens - eos) / sum(fwd),
            "tpf_sample_mean": mean([r["n_tokens"] / f for r, f in zip(recs, fwd) if f > 0])}  # n / 0: no value


def pooled_tpf_ceiling(records: Iterable[dict]) -> float:
    """sum(n_tokens) / sum(fewest forwards) over the records that decoded in blocks (nan if none): one denoising
    forward per block plus the commit forwards the decode ran between them: 2 * blocks - 1 unfused, blocks with
    the fused commit forward. Read off the record's counts, not its fused_commit setting, which some decoders
    do not follow (rule fast_dllm_v2 never fuses; the full-sequence layout has no commit forward)."""
    recs = [r for r in records if r["block_steps"]]
    if not recs:
        return float("nan")
    return sum(r["n_tokens"] for r in recs) / sum(len(r["block_steps"]) + r["forwards"]["commit"] for r in recs)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b = pairs only the first system got right, c = only the second."""
    if b < 0 or c < 0:
        raise ValueError(f"McNemar needs discordant counts >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2 ** n)  # int / int is correctly rounded however large n is


def paired_counts(first: dict, second: dict) -> tuple[int, int, int]:
    """(n, b, c) over the keys both map to a verdict: n paired samples, b right only in first, c only
    in second."""
    keys = first.keys() & second.keys()
    b = sum(1 for k in keys if first[k] and not second[k])
    c = sum(1 for k in keys if second[k] and not first[k])
    return len(keys), b, c


def seed_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max) of per-seed values."""
    if not values:
        raise ValueError("seed spread of no values")
    return min(values), percentile(values, 50), max(values)


def tokens_per_s(n_tokens: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"tokens/s needs a positive wall time, got {seconds}")
    return n_tokens / seconds


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def accuracy(verdicts: Sequence[bool]) -> float:
    return mean([1.0 if v else 0.0 for v in verdicts])


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a passing sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def aup_counted(tpfs: Sequence[float], accuracies: Sequence[float], max_drop: float = 5.0) -> list[bool]:
    """Which curve points AUP's drop rule keeps: those at most max_drop points (accuracy in percent) below the
    accuracy of the least parallel point (lowest TPF); accuracies are fractions."""
    first = min(range(len(tpfs)), key=lambda i: tpfs[i])
    return [100.0 * a >= 100.0 * accuracies[first] - max_drop for a in accuracies]


def aup(tpfs: Sequence[float], accuracies: Sequence[float], y_max: float | None = None,
        alpha: float = 3.0, max_drop: float = 5.0) -> float:
    """Accuracy under parallelism; accuracies are fractions in [0, 1] (scaled to percent inside, the
    scale of d3LLM's published numbers); y_max is a fraction too."""
    if len(tpfs) != len(accuracies) or not tpfs:
        raise ValueError(f"AUP needs equally many TPF and accuracy values (>= 1), got {len(tpfs)} and {len(accuracies)}")
    if min(tpfs) <= 0:
        raise ValueError("AUP needs positive TPF values")
    points = sorted(zip(tpfs, (100.0 * a for a in accuracies)))
    y_top = 100.0 * y_max if y_max is not None else max(y for _, y in points)
    if y_top <= 0:
        return 0.0

    def weighted(y: float) -> float:
        return y * min(math.exp(-alpha * (1.0 - y / y_top)), 1.0)

    kept = [p for p, c in zip(points, aup_counted([r for r, _ in points], [y / 100 for _, y in points], max_drop)) if c]
    area = kept[0][0] * kept[0][1]
    for (r0, y0), (r1, y1) in zip(kept, kept[1:]):
        area += (r1 - r0) * (weighted(y1) + weighted(y0)) / 2
    return area


def summarize(records: Iterable[dict], keys: Sequence[str],
              key_of: Callable[[dict, str], object] | None = None) -> list[dict]:
    """One row per group of records (grouped by `keys`, looked up with key_of(record, key) or
    record[key]): n samples, accuracy, pass@k (k up to the smallest samples-per-prompt count), TPF,
    EOS-free TPF and TPF ceiling as ratios of sums (pooled_tpf; tpf_sample_mean is the per-sample
    mean), mean and median tokens/s, latency percentiles, mean steps per block over all blocks, and
    the batch sizes the timings were taken at."""
    get = key_of or (lambda r, k: r[k])
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[tuple(get(r, k) for k in keys)].append(r)
    rows = []
    for group in sorted(groups, key=lambda g: tuple(_order(x) for x in g)):
        recs = groups[group]
        per_prompt: dict[str, list[bool]] = defaultdict(list)
        for r in recs:
            per_prompt[r["prompt_id"]].append(bool(r["verdict"]))
        n_min = min(len(v) for v in per_prompt.values())
        speeds = [r["timing"]["tokens_per_s"] for r in recs]
        latency = [r["timing"]["total_s"] for r in recs]
        steps = [s for r in recs for s in r["block_steps"]]
        row = dict(zip(keys, group))
        row.update(n=len(recs), n_prompts=len(per_prompt), accuracy=accuracy([r["verdict"] for r in recs]))
        for k in (k for k in PASS_KS if k <= n_min and (k > 1 or n_min > 1)):
            row[f"pass@{k}"] = mean([pass_at_k(len(v), sum(v), k) for v in per_prompt.values()])
        row.update(pooled_tpf(recs))
        row.update(tpf_ceiling=pooled_tpf_ceiling(recs), tokens_per_s=mean(speeds),
                   tokens_per_s_median=percentile(speeds, 50))
        row.update({f"latency_p{q}_s": percentile(latency, q) for q in LATENCY_QUANTILES})
        row["steps_per_block"] = mean(steps) if steps else float("nan")
        row["batch_size"] = ",".join(str(b) for b in sorted({r["batch_size"] for r in recs}))
        rows.append(row)
    return rows


def _order(x: object) -> tuple:
    """Numbers sort numerically (thresholds), everything else by its text."""
    return (0, x, "") if isinstance(x, (int, float)) else (1, 0, str(x))
