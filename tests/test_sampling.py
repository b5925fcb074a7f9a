"""Token selection and the counter-hash noise of orl.engine.sampling on hand-computed tensors
(DESIGN section 3)."""
import math

import pytest
import torch

from orl.engine.sampling import hash_uniform, select_tokens, unit_interval


# ---------------------------------------------------------------- token selection

def test_select_tokens_greedy_confidence_entropy():
    logits = torch.tensor([[[0.0, math.log(3.0), float("-inf")], [5.0, 5.0, 5.0]]])
    x, conf, ent = select_tokens(logits, 0.0, None)
    assert x.tolist() == [[1, 0]]
    assert conf[0, 0].item() == pytest.approx(0.75)
    assert conf[0, 1].item() == pytest.approx(1 / 3)
    assert ent[0, 0].item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), rel=1e-5)
    assert ent[0, 1].item() == pytest.approx(math.log(3), rel=1e-5)


def test_select_tokens_entropy_only_on_request():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    logits[..., 3] = float("-inf")
    noise = hash_uniform(torch.tensor([1, 2]), torch.tensor([0, 4]), 5, 11)
    for temperature, nz in ((0.0, None), (0.7, noise)):
        x, conf, ent = select_tokens(logits, temperature, nz)
        x2, conf2, none = select_tokens(logits, temperature, nz, entropy=False)
        assert none is None and torch.equal(x, x2) and torch.equal(conf, conf2)
        p = logits.softmax(-1)
        torch.testing.assert_close(conf, p.gather(-1, x[..., None]).squeeze(-1))
        torch.testing.assert_close(ent, -(p * p.clamp(min=1e-30).log()).sum(-1))
    assert torch.equal(select_tokens(logits, 0.0, None)[0], logits.argmax(-1))


def test_sampling_never_picks_a_banned_token_even_with_extreme_noise():
    logits = torch.tensor([[[1.0, float("-inf"), 2.0, float("-inf")]]])
    # the largest noise the hash can give, on the banned tokens
    top = unit_interval(torch.tensor((1 << 31) - 1))
    noise = torch.tensor([[[0.5, top, 0.5, top]]])
    x, conf, _ = select_tokens(logits, 1.0, noise)
    assert x.item() in (0, 2)
    assert torch.isfinite(conf).all()


# ---------------------------------------------------------------- hash noise

def test_unit_interval_is_strictly_inside_0_1_at_the_extremes():
    x = torch.tensor([0, 1, 255, 256, (1 << 31) - 256, (1 << 31) - 64, (1 << 31) - 1])
    u = unit_interval(x)
    assert u.dtype == torch.float32
    assert (u > 0).all() and (u < 1).all(), u.tolist()
    assert torch.isfinite(-torch.log(-torch.log(u))).all()


def test_hash_uniform_range_determinism_and_independence():
    seed, step = torch.tensor([0, 1, 0]), torch.tensor([0, 0, 5])
    u = hash_uniform(seed, step, 16, 4096)
    assert u.shape == (3, 16, 4096) and u.dtype == torch.float32
    assert (u > 0).all() and (u < 1).all()
    assert torch.equal(u, hash_uniform(seed, step, 16, 4096))        # a pure function
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])  # seed and step both matter
    # a row's noise depends only on its own (seed, step), not on the rest of the batch
    assert torch.equal(u[2], hash_uniform(torch.tensor([0]), torch.tensor([5]), 16, 4096)[0])
    # roughly uniform, positions and tokens decorrelated
    assert abs(u.mean().item() - 0.5) < 0.01
    assert abs(u.var().item() - 1 / 12) < 0.005
    assert (u[0, 0] == u[0, 1]).float().mean().item() < 0.01
    hist = torch.histc(u, bins=10, min=0, max=1) / u.numel()
    assert (hist - 0.1).abs().max().item() < 0.01
