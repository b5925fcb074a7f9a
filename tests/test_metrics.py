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


def _rec(pid: str, task: str, verdict: bool, tpf: float, tps: float, total: float, steps: list[int], batch=1) -> dict:
    return {"prompt_id": pid, "task": task, "verdict": verdict, "tpf": tpf, "block_steps": steps, "n_tokens": 6,
            "timing": {"tokens_per_s": tps, "total_s": total}, "batch_size": batch}


def test_tpf_ceiling():
    assert metrics.tpf_ceiling(4, 1) == 4.0 and metrics.tpf_ceiling(40, 3) == 8.0
    with pytest.raises(ValueError, match="block"):
        metrics.tpf_ceiling(4, 0)


def test_summarize_groups_and_pass_at_k():
    recs = [_rec("a/0", "a", True, 2.0, 10.0, 1.0, [2, 4]), _rec("a/0", "a", False, 1.0, 20.0, 2.0, [3]),
            _rec("a/1", "a", False, 3.0, 30.0, 3.0, [1]), _rec("a/1", "a", False, 4.0, 40.0, 4.0, [2]),
            _rec("b/0", "b", True, 5.0, 50.0, 5.0, [5], batch=4)]
    rows = metrics.summarize(recs, ["task"])
    a, b = rows
    assert a["task"] == "a" and a["n"] == 4 and a["n_prompts"] == 2
    assert a["accuracy"] == 0.25
    assert a["pass@1"] == pytest.approx(0.25)
    assert a["pass@2"] == pytest.approx(0.5)  # prompt a/0 passes one of two draws -> 1; a/1 -> 0
    assert a["tpf"] == pytest.approx(2.5) and a["tokens_per_s"] == pytest.approx(25.0)
    assert a["tokens_per_s_median"] == pytest.approx(25.0)
    assert a["latency_p50_s"] == pytest.approx(2.5) and a["latency_p90_s"] == pytest.approx(3.7)
    assert a["steps_per_block"] == pytest.approx(12 / 5)  # over all 5 blocks, not per record
    # 6 tokens: 2 blocks -> at best 1 + 1 denoise and 1 commit forward = 2.0; 1 block -> 6.0
    assert a["tpf_ceiling"] == pytest.approx((2.0 + 6.0 * 3) / 4)
    assert b["n"] == 1 and b["accuracy"] == 1.0 and "pass@1" not in b and b["batch_size"] == "4"
