"""orl.eval.metrics against hand-computed values (DESIGN section 5)."""
from __future__ import annotations

import math

import pytest

from orl.eval import metrics


def test_tpf_counts_denoise_and_commit_forwards_not_prefill():
    # 2 blocks of 4: block 1 in 3 steps + 1 commit forward, block 2 in 2 steps with EOS at its 3rd token
    # -> 7 tokens (EOS included) / 6 forwards
    assert metrics.tpf(7, 5, 1) == pytest.approx(7 / 6)
    assert metrics.tpf(16, 16, 0) == 1.0
    with pytest.raises(ValueError):
        metrics.tpf(3, 0, 0)


def test_tokens_per_s_mean_percentile_accuracy():
    assert metrics.tokens_per_s(30, 1.5) == 20.0
    with pytest.raises(ValueError):
        metrics.tokens_per_s(3, 0.0)
    xs = [4.0, 1.0, 3.0, 2.0]
    assert metrics.percentile(xs, 50) == 2.5
    assert metrics.percentile(xs, 0) == 1.0 and metrics.percentile(xs, 100) == 4.0
    assert metrics.percentile(xs, 90) == pytest.approx(3.7)  # rank 2.7 between 3 and 4
    assert metrics.percentile([5.0], 99) == 5.0
    assert metrics.accuracy([True, False, True, True]) == 0.75
    with pytest.raises(ValueError):
        metrics.accuracy([])


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_closed_form(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert metrics.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


def test_pass_at_k_hand_values_and_large_n():
    assert metrics.pass_at_k(5, 2, 1) == pytest.approx(0.4)          # pass@1 = c / n
    assert metrics.pass_at_k(4, 1, 2) == pytest.approx(0.5)          # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert metrics.pass_at_k(3, 1, 3) == 1.0
    # n = 1000: the binomials have hundreds of digits; the product form stays exact enough
    exact = 1 - math.comb(990, 100) / math.comb(1000, 100)
    assert metrics.pass_at_k(1000, 10, 100) == pytest.approx(exact, rel=1e-12)
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4)):
        with pytest.raises(ValueError):
            metrics.pass_at_k(*bad)


def test_aup_by_hand():
    # points (TPF, accuracy): (2, 0.78), (1, 0.80), (4, 0.70); y_max 80%, alpha 3, max drop 5 points
    # -> (4, 70%) is dropped (70 < 80 - 5); W(80) = 1, W(78) = exp(-3 * (1 - 78/80)) = exp(-0.075)
    # AUP = 1 * 80 + (2 - 1) * (78 * exp(-0.075) + 80) / 2
    expected = 80 + (78 * math.exp(-0.075) + 80) / 2
    assert metrics.aup([2, 1, 4], [0.78, 0.80, 0.70]) == pytest.approx(expected)
    assert expected == pytest.approx(156.18, abs=0.01)
    # a curve that keeps its accuracy is a trapezoid area: 1*50 + (3-1)*(50+50)/2 with y_max 50%
    assert metrics.aup([1, 3], [0.5, 0.5]) == pytest.approx(150.0)
    # a better model elsewhere (y_max 100%) discounts every point: W(50) = exp(-1.5)
    assert metrics.aup([1, 3], [0.5, 0.5], y_max=1.0) == pytest.approx(50 + 2 * 50 * math.exp(-1.5))
    assert metrics.aup([2.5], [0.9]) == pytest.approx(225.0)
    with pytest.raises(ValueError):
        metrics.aup([1, 2], [0.5])


def _rec(pid: str, task: str, verdict: bool, tokens: int, fwd: tuple[int, int], finished: bool, tps: float,
         total: float, steps: list[int], batch=1) -> dict:
    return {"prompt_id": pid, "task": task, "verdict": verdict, "n_tokens": tokens, "finished": finished,
            "forwards": {"prefill": 1, "step": fwd[0], "commit": fwd[1]}, "tpf": metrics.tpf(tokens, *fwd),
            "block_steps": steps, "timing": {"tokens_per_s": tps, "total_s": total}, "batch_size": batch}


def test_tpf_ceiling():
    assert metrics.tpf_ceiling(4, 1) == 4.0 and metrics.tpf_ceiling(40, 3) == 8.0
    assert metrics.tpf_ceiling(40, 3, fused=True) == pytest.approx(40 / 3)  # no commit forwards of their own
    with pytest.raises(ValueError, match="block"):
        metrics.tpf_ceiling(4, 0)


def test_pooled_tpf_is_a_ratio_of_sums():
    # a short answer ending in EOS, 4 tokens in 1 forward (TPF 4), and a long one cut at the budget,
    # 20 tokens in 8 denoising + 2 commit forwards (TPF 2)
    recs = [_rec("a/0", "a", True, 4, (1, 0), True, 1, 1, [1]), _rec("a/1", "a", True, 20, (8, 2), False, 1, 1, [3, 3, 2])]
    t = metrics.pooled_tpf(recs)
    assert t["tpf"] == pytest.approx(24 / 11)             # 2.18, not the mean of ratios 3.0
    assert t["tpf_no_eos"] == pytest.approx(23 / 11)      # only the finished sample ends with an EOS
    assert t["tpf_sample_mean"] == pytest.approx(3.0)
    # ceiling: 1 block -> 1 forward, 3 blocks -> 3 denoising + 2 commit forwards
    assert metrics.pooled_tpf_ceiling(recs) == pytest.approx(24 / 6)
    # the commit rides on the next block: a fused decode records no commit forward of its own
    fused = [{**r, "decode": {"fused_commit": True}, "forwards": {**r["forwards"], "commit": 0}} for r in recs]
    assert metrics.pooled_tpf_ceiling(fused) == pytest.approx(24 / 4)
    assert math.isnan(metrics.pooled_tpf_ceiling([{**recs[0], "block_steps": []}]))
    with pytest.raises(ValueError, match="no records"):
        metrics.pooled_tpf([])
    with pytest.raises(ValueError, match="forward"):
        metrics.pooled_tpf([_rec("a/0", "a", True, 4, (0, 0), True, 1, 1, [1])])


def test_mcnemar_exact_by_hand():
    # b = 10, c = 2: n = 12, P(X <= 2) = (C(12,0) + C(12,1) + C(12,2)) / 2^12 = (1 + 12 + 66) / 4096;
    # two-sided: 2 * 79 / 4096 = 0.0386
    assert metrics.mcnemar_exact(10, 2) == pytest.approx(79 / 2048) == metrics.mcnemar_exact(2, 10)
    assert round(metrics.mcnemar_exact(10, 2), 4) == 0.0386
    assert metrics.mcnemar_exact(0, 5) == pytest.approx(2 / 32)       # all 5 discordant pairs one way
    assert metrics.mcnemar_exact(0, 0) == 1.0 and metrics.mcnemar_exact(1, 0) == 1.0
    assert metrics.mcnemar_exact(3, 3) == 1.0                         # 2 * 42/64 capped at 1
    assert metrics.mcnemar_exact(7, 1) == pytest.approx(2 * (1 + 8) / 256)  # 0.0703
    assert metrics.mcnemar_exact(500, 500) == 1.0                     # large n: exact big-int arithmetic
    assert 0 < metrics.mcnemar_exact(400, 300) < 0.001
    with pytest.raises(ValueError):
        metrics.mcnemar_exact(-1, 2)


def test_paired_counts_and_seed_spread():
    first = {"p0": True, "p1": True, "p2": False, "p3": False, "only-first": True}
    second = {"p0": True, "p1": False, "p2": True, "p3": True, "only-second": False}
    assert metrics.paired_counts(first, second) == (4, 1, 2)  # unpaired keys are left out
    assert metrics.seed_spread([3.0, 1.0, 2.0]) == (1.0, 2.0, 3.0)
    assert metrics.seed_spread([4.0, 1.0]) == (1.0, 2.5, 4.0)
    with pytest.raises(ValueError):
        metrics.seed_spread([])


def test_summarize_groups_and_pass_at_k():
    recs = [_rec("a/0", "a", True, 6, (2, 1), True, 10.0, 1.0, [2, 4]),
            _rec("a/0", "a", False, 4, (4, 0), False, 20.0, 2.0, [3]),
            _rec("a/1", "a", False, 3, (1, 0), True, 30.0, 3.0, [1]),
            _rec("a/1", "a", False, 8, (2, 0), True, 40.0, 4.0, [2]),
            _rec("b/0", "b", True, 5, (5, 0), True, 50.0, 5.0, [5], batch=4)]
    rows = metrics.summarize(recs, ["task"])
    a, b = rows
    assert a["task"] == "a" and a["n"] == 4 and a["n_prompts"] == 2
    assert a["accuracy"] == 0.25
    assert a["pass@1"] == pytest.approx(0.25)
    assert a["pass@2"] == pytest.approx(0.5)  # prompt a/0 passes one of two draws -> 1; a/1 -> 0
    # 21 tokens / 10 forwards; 3 finished samples end with EOS; per-sample TPFs 2, 1, 3, 4
    assert a["tpf"] == pytest.approx(2.1) and a["tpf_no_eos"] == pytest.approx(1.8)
    assert a["tpf_sample_mean"] == pytest.approx(2.5)
    assert a["tokens_per_s"] == pytest.approx(25.0)
    assert a["tokens_per_s_median"] == pytest.approx(25.0)
    assert a["latency_p50_s"] == pytest.approx(2.5) and a["latency_p90_s"] == pytest.approx(3.7)
    assert a["steps_per_block"] == pytest.approx(12 / 5)  # over all 5 blocks, not per record
    # fewest forwards for 2, 1, 1, 1 blocks: 3 + 1 + 1 + 1
    assert a["tpf_ceiling"] == pytest.approx(21 / 6)
    assert b["n"] == 1 and b["accuracy"] == 1.0 and "pass@1" not in b and b["batch_size"] == "4"
