"""Commit rules and ranking of orl.engine.commit on hand-computed tensors (DESIGN section 3)."""
import pytest
import torch

from orl.engine.commit import commit_positions, entropy_rule, factor_rule, rank_desc, threshold_rule, topk_rule
from orl.engine.config import DecodeConfig


def B(*rows):
    return torch.tensor(rows, dtype=torch.bool)


def F(*rows):
    return torch.tensor(rows, dtype=torch.float)


def idx(mask: torch.Tensor) -> list[list[int]]:
    return [r.nonzero().flatten().tolist() for r in mask]


# ---------------------------------------------------------------- rank_desc

def test_rank_desc_orders_by_score_ties_by_lower_index_and_non_candidates_last():
    score = F([0.5, 0.9, 0.5, 0.1, 0.9])
    cand = B([True, True, True, True, False])
    # candidates: 1 (0.9) > 0 (0.5, lower index) > 2 (0.5) > 3 (0.1); position 4 is not a candidate
    assert rank_desc(score, cand).tolist() == [[1, 0, 2, 3, 4]]
    all_tied = F([0.3, 0.3, 0.3, 0.3])
    assert rank_desc(all_tied, B([True] * 4)).tolist() == [[0, 1, 2, 3]]
    # a non-candidate with the best score still ranks after every candidate
    assert rank_desc(F([1.0, 0.2, 0.1]), B([False, True, True])).tolist() == [[2, 0, 1]]


# ---------------------------------------------------------------- threshold

def test_threshold_commits_all_confident_candidates():
    conf = F([0.95, 0.5, 0.91, 0.99, 0.2])
    cand = B([True, True, True, False, True])
    # 3 is above tau but already resolved (not a candidate)
    assert idx(threshold_rule(conf, cand, 0.9)) == [[0, 2]]


def test_threshold_commits_at_least_the_best_candidate():
    conf = F([0.3, 0.6, 0.6, 0.1], [0.2, 0.2, 0.2, 0.2])
    cand = B([True, True, True, True], [False, True, True, True])
    # row 0: nothing reaches tau, the best (first of the tie) goes; row 1: first candidate of a full tie
    assert idx(threshold_rule(conf, cand, 0.9)) == [[1], [1]]
    # tau exactly met counts as confident; tau = 1 commits just the best
    assert idx(threshold_rule(F([0.5, 0.7, 0.7]), B([True] * 3), 0.7)) == [[1, 2]]
    assert idx(threshold_rule(F([0.999, 0.5, 0.9999]), B([True] * 3), 1.0)) == [[2]]


def test_threshold_argmax_equals_the_rank_rule():
    """'At least the best one' by argmax (first maximum) == rank 0 of the stable argsort, ties included."""
    torch.manual_seed(0)
    for tau in (0.3, 0.6, 1.0):
        conf = torch.randint(0, 5, (64, 7)).float() / 5  # coarse values: many ties
        cand = torch.rand(64, 7) < 0.6                   # some rows without candidates
        by_rank = cand & ((conf >= tau) | (rank_desc(conf, cand) == 0))
        assert torch.equal(threshold_rule(conf, cand, tau), by_rank)


def test_rules_commit_nothing_when_nothing_is_unresolved():
    conf, none = F([0.99, 0.99]), B([False, False])
    assert not threshold_rule(conf, none, 0.5).any()
    assert not topk_rule(conf, none, torch.tensor([0]), torch.tensor([2]), 2).any()
    assert not factor_rule(conf, none, 10.0).any()
    assert not entropy_rule(F([0.0, 0.0]), none, 10.0).any()


# ---------------------------------------------------------------- topk (LLaDA schedule)

@pytest.mark.parametrize("n_valid,n_steps,expected", [
    (10, 4, [3, 3, 2, 2]),
    (8, 4, [2, 2, 2, 2]),
    (16, 16, [1] * 16),
    (5, 8, [1, 1, 1, 1, 1]),   # more steps than positions: one per step, done after n_valid steps
    (7, 3, [3, 2, 2]),
])
def test_topk_schedule_counts(n_valid, n_steps, expected):
    L = 16
    torch.manual_seed(n_valid * 31 + n_steps)
    conf = torch.rand(1, L)
    cand = torch.zeros(1, L, dtype=torch.bool)
    cand[0, :n_valid] = True
    counts, step = [], 0
    while cand.any():
        c = topk_rule(conf, cand, torch.tensor([step]), torch.tensor([n_valid]), n_steps)
        assert not (c & ~cand).any()
        counts.append(int(c.sum()))
        cand = cand & ~c
        step += 1
    assert counts == expected


def test_topk_commits_the_most_confident_and_per_row_schedules():
    conf = F([0.1, 0.8, 0.3, 0.9, 0.5, 0.2], [0.6, 0.6, 0.1, 0.1, 0.6, 0.0])
    cand = B([True] * 6, [True] * 6)
    # n_valid 6 over 4 steps: step 0 -> 2 tokens, step 2 -> 1 token (row-wise steps)
    c = topk_rule(conf, cand, torch.tensor([0, 2]), torch.tensor([6, 6]), 4)
    assert idx(c) == [[1, 3], [0]]
    # when fewer candidates are left than the schedule asks for, all of them go
    c = topk_rule(conf[:1], B([False, False, True, False, False, False]), torch.tensor([0]), torch.tensor([6]), 1)
    assert idx(c) == [[2]]


# ---------------------------------------------------------------- factor (Fast-dLLM)

def test_factor_rule_largest_n():
    # sorted conf 0.95, 0.9, 0.8, 0.5: (n + 1)(1 - c_n) = 0.1, 0.3, 0.8, 2.5
    conf = F([0.5, 0.95, 0.8, 0.9])
    cand = B([True] * 4)
    assert idx(factor_rule(conf, cand, 1.0)) == [[1, 2, 3]]
    assert idx(factor_rule(conf, cand, 0.5)) == [[1, 3]]
    assert idx(factor_rule(conf, cand, 0.3)) == [[1]]     # 0.3 < 0.3 is false: only n = 1
    assert idx(factor_rule(conf, cand, 0.05)) == [[1]]    # none qualifies: at least one
    assert idx(factor_rule(conf, cand, 3.0)) == [[0, 1, 2, 3]]
    # non-candidates neither count nor get committed
    assert idx(factor_rule(conf, B([True, False, True, True]), 1.0)) == [[2, 3]]  # 0.9, 0.8: 0.2, 0.6


# ---------------------------------------------------------------- entropy bound

def test_entropy_rule_bound():
    # sorted H: 0.1 (pos 2), 0.2 (pos 0), 0.3 (pos 3), 1.0 (pos 1)
    # sets by size: sum - max = 0, 0.1, 0.3, 0.6
    ent = F([0.2, 1.0, 0.1, 0.3])
    cand = B([True] * 4)
    assert idx(entropy_rule(ent, cand, 0.0)) == [[2]]
    assert idx(entropy_rule(ent, cand, 0.15)) == [[0, 2]]
    assert idx(entropy_rule(ent, cand, 0.35)) == [[0, 2, 3]]
    assert idx(entropy_rule(ent, cand, 0.65)) == [[0, 1, 2, 3]]
    # ties: lower index first
    assert idx(entropy_rule(F([0.5, 0.5, 0.5]), B([True] * 3), 0.5)) == [[0, 1]]
    # resolved positions are ignored even with zero entropy
    assert idx(entropy_rule(F([0.0, 0.4, 0.2, 0.0]), B([False, True, True, False]), 0.1)) == [[2]]


def test_commit_positions_dispatch_and_unknown_rule():
    conf, ent = F([0.95, 0.5, 0.91]), F([0.1, 2.0, 0.3])
    cand, step, n_valid = B([True] * 3), torch.tensor([0]), torch.tensor([3])
    got = {r: idx(commit_positions(DecodeConfig(rule=r, threshold=0.9, steps_per_block=3, factor=1.0,
                                                entropy_bound=0.2), conf, ent, cand, step, n_valid))
           for r in ("threshold", "topk", "factor", "entropy")}
    assert got == {"threshold": [[0, 2]], "topk": [[0]], "factor": [[0, 2]], "entropy": [[0, 2]]}
    cfg = DecodeConfig()
    cfg.rule = "nope"  # bypasses validate()
    with pytest.raises(ValueError, match="nope"):
        commit_positions(cfg, conf, ent, cand, step, n_valid)
