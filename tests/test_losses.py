"""ORL losses against hand-computed values (DESIGN section 4)."""
import math

import pytest
import torch

from orl.train.losses import (aec_loss, aec_pairs, capped_reverse_kl, certainty_forcing, gated_ce, kl_anchor,
                              normalized_entropy, per_response_mean, state_entropy)


def test_aec_worked_example():
    src = torch.tensor([0.40, 0.40])
    nxt = torch.tensor([0.36, 0.30])
    out = aec_pairs(src, nxt, rho=0.25)
    assert out[0].item() == pytest.approx(0.0036, abs=1e-9)
    assert out[1].item() == 0.0


def test_aec_source_is_detached():
    src = torch.tensor([0.40], requires_grad=True)
    nxt = torch.tensor([0.36], requires_grad=True)
    aec_pairs(src, nxt, 0.25).sum().backward()
    assert src.grad is None or src.grad.abs().sum() == 0
    assert nxt.grad.item() == pytest.approx(2 * 0.06)


def test_per_response_mean_weights_responses_equally():
    # response 0: values 1, 1, 1 (3 positions); response 1: value 4 (1 position) -> (1 + 4) / 2
    v = torch.tensor([1.0, 1.0, 1.0, 4.0, 100.0])
    w = torch.tensor([1, 1, 1, 1, 0])
    r = torch.tensor([0, 0, 0, 1, 1])
    assert per_response_mean(v, w, r, 2).item() == pytest.approx(2.5)
    # a response without any weighted position does not count
    assert per_response_mean(v, torch.tensor([1, 1, 1, 0, 0]), r, 2).item() == pytest.approx(1.0)


def test_gated_ce_only_unresolved():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]]))
    targets = torch.tensor([0, 1, 2])
    unresolved = torch.tensor([True, False, True])
    out = gated_ce(logits, targets, unresolved, torch.tensor([0, 0, 0]), 1)
    assert out.item() == pytest.approx((math.log(2) + math.log(3)) / 2, rel=1e-5)


def test_normalized_entropy_bounds():
    assert normalized_entropy(torch.zeros(1, 7)).item() == pytest.approx(1.0)
    assert normalized_entropy(torch.tensor([[30.0, 0.0, 0.0]])).item() < 1e-10
    banned = torch.tensor([[0.0, 0.0, float("-inf"), float("-inf")]])
    assert normalized_entropy(banned).item() == pytest.approx(math.log(2) / math.log(4))


def test_state_entropy_and_aec_loss():
    h = torch.tensor([0.4, 0.4, 0.9, 0.36, 0.5])
    unresolved = torch.tensor([True, True, False, True, False])
    state = torch.tensor([0, 0, 0, 1, 1])
    hs = state_entropy(h, unresolved, state, 2)
    assert hs.tolist() == pytest.approx([0.4, 0.36])
    loss = aec_loss(hs, torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), 1, rho=0.25)
    assert loss.item() == pytest.approx(0.0036, abs=1e-7)
    assert aec_loss(hs, torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long),
                    torch.tensor([], dtype=torch.long), 1, 0.25).item() == 0.0


def test_capped_reverse_kl():
    p = torch.tensor([[0.5, 0.5]])
    q = torch.tensor([[0.25, 0.75]])
    kl = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert capped_reverse_kl(p.log(), q.log(), cap=10.0).item() == pytest.approx(kl, rel=1e-5)
    assert capped_reverse_kl(p.log(), q.log(), cap=0.05).item() == pytest.approx(0.05)
    assert capped_reverse_kl(q.log(), q.log(), cap=1.0).item() == pytest.approx(0.0, abs=1e-7)
    banned = torch.tensor([[0.0, 1.0, float("-inf")]])
    assert torch.isfinite(capped_reverse_kl(banned, banned, 1.0)).all()


def test_kl_anchor_only_confident_positions():
    lp = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]]))
    lq = torch.log(torch.tensor([[0.25, 0.75], [0.1, 0.9]]))
    conf = torch.tensor([True, False])
    out = kl_anchor(lp, lq, conf, torch.tensor([0, 0]), 1, cap=10.0)
    assert out.item() == pytest.approx(capped_reverse_kl(lp[:1], lq[:1], 10.0).item(), rel=1e-6)


def test_banned_tokens_give_finite_gradients():
    logits = torch.tensor([[1.0, 2.0, float("-inf")], [0.5, float("-inf"), 0.1]], requires_grad=True)
    ref = logits.detach() + torch.tensor([[0.3, 0.0, 0.0], [0.0, 0.0, -0.2]])
    loss = normalized_entropy(logits).sum() + capped_reverse_kl(logits, ref, 10.0).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def test_certainty_forcing_hand_computed():
    # 3 responses; response 0: two right positions (0.2, 0.4) and a wrong one (0.9); response 1: only a wrong one;
    # response 2: one right but unverified position (past a stop string). The mean is over the responses with a
    # verified position (0 and 1): ((0.2 + 0.4) / 2 + 0) / 2 = 0.15
    h = torch.tensor([0.2, 0.4, 0.9, 0.7, 0.5], requires_grad=True)
    right = torch.tensor([True, True, False, False, True])
    verified = torch.tensor([True, True, True, True, False])
    response = torch.tensor([0, 0, 0, 1, 2])
    out = certainty_forcing(h, right, verified, response, 3)
    assert out.item() == pytest.approx(0.15)
    out.backward()
    # the gradient reaches the right, verified positions only: 1 / (2 positions * 2 responses)
    assert h.grad.tolist() == pytest.approx([0.25, 0.25, 0.0, 0.0, 0.0])
    # torchrun: the count of responses comes from every process
    assert certainty_forcing(h, right, verified, response, 3, torch.tensor(4)).item() == pytest.approx(0.075)
    assert certainty_forcing(h, right & False, verified, response, 3).item() == 0.0
