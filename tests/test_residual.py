"""Residual context (DESIGN section 2): the soft embedding z, the RCD interpolation and the ORL
adapter, and the guarantee that a cold start / untrained adapter is exactly the plain model."""
import math

import pytest
import torch

from orl.model import ModelArgs, Transformer, masks
from orl.model.residual import ResidualAdapter, residual_inputs, residual_state

V = 40
MASK = V - 1
P, L = 3, 5  # prompt length, block length


def tiny_model(adapter_dim: int = 0, **kw) -> Transformer:
    torch.manual_seed(0)
    args = ModelArgs(vocab_size=V, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                     ffn_dim=48, max_seq_len=32, adapter_dim=adapter_dim, adapter_alpha=0.7, **kw)
    return Transformer(args).eval()


def train_adapter(model: Transformer) -> None:
    """Give the adapter a nonzero down projection, as after some ORL updates."""
    with torch.no_grad():
        model.model.residual_adapter.down_proj.weight.normal_(0, 0.2)


def block_inputs(batch: int = 2):
    """[prompt | one noisy block]: prompt resolved, block partly masked, block mask = inference mask."""
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, V - 1, (batch, P + L), generator=g)
    tok[:, P + 1] = MASK
    tok[:, P + 3] = MASK
    block = masks.block_ids(P, L, L)
    state = torch.cat([torch.zeros(P, dtype=torch.long), torch.ones(L, dtype=torch.long)])
    mask = masks.visibility(block, state, block, state)[None].expand(batch, -1, -1)
    pos = torch.arange(P + L)[None].expand(batch, -1)
    return tok, pos, mask


def residual_kw(tok, mode, z=None, a=None, unresolved=None):
    B, T = tok.shape
    return dict(mask_id=MASK, residual=mode,
                z=torch.zeros(B, T, 32) if z is None else z,
                a=torch.zeros(B, T) if a is None else a,
                unresolved=(tok == MASK) if unresolved is None else unresolved)


@pytest.mark.parametrize("mode", ["rcd", "adapter"])
def test_cold_start_is_plain_model_bit_for_bit(mode):
    model = tiny_model(adapter_dim=16)
    train_adapter(model)  # even a trained adapter maps z = 0 to 0
    tok, pos, mask = block_inputs()
    with torch.no_grad():
        plain = model(tok, pos, mask)
        cold = model(tok, pos, mask, **residual_kw(tok, mode))
    assert torch.equal(cold, plain)


@pytest.mark.parametrize("mode", ["rcd", "adapter"])
def test_cold_start_all_unresolved_is_plain_model(mode):
    # first step of a fully masked canvas: every position is unresolved and holds the mask token
    model = tiny_model(adapter_dim=16)
    train_adapter(model)
    _, pos, mask = block_inputs()
    tok = torch.full((2, P + L), MASK)
    with torch.no_grad():
        plain = model(tok, pos, mask)
        cold = model(tok, pos, mask, **residual_kw(tok, mode, unresolved=torch.ones_like(tok, dtype=torch.bool)))
    assert torch.equal(cold, plain)


def test_fresh_adapter_equals_base_model_with_nonzero_z():
    with_adapter = tiny_model(adapter_dim=16)
    base = tiny_model(adapter_dim=0)
    missing = base.load_state_dict(with_adapter.state_dict(), strict=False)
    assert all(k.startswith("model.residual_adapter.") for k in missing.unexpected_keys)
    tok, pos, mask = block_inputs()
    z = torch.randn(2, P + L, 32) * 3
    with torch.no_grad():
        ref = base(tok, pos, mask)
        out = with_adapter(tok, pos, mask, **residual_kw(tok, "adapter", z=z))
    assert torch.equal(out, ref)
    # the same z through a trained adapter does change the output, so the check above has teeth
    train_adapter(with_adapter)
    with torch.no_grad():
        moved = with_adapter(tok, pos, mask, **residual_kw(tok, "adapter", z=z))
    assert not torch.allclose(moved, ref, atol=1e-4)


def test_adapter_down_proj_zero_init():
    adapter = ResidualAdapter(16, 8)
    assert not adapter.down_proj.weight.any()
    assert not adapter(torch.randn(3, 16)).any()


def test_residual_state_uniform_logits():
    E = torch.randn(V, 6)
    z, a = residual_state(torch.zeros(2, 3, V), E)
    assert z.shape == (2, 3, 6) and a.shape == (2, 3)
    torch.testing.assert_close(a, torch.ones(2, 3))  # maximum entropy -> a = 1
    torch.testing.assert_close(z, E.mean(0).expand(2, 3, 6))


def test_residual_state_peaked_logits():
    E = torch.randn(V, 6)
    logits = torch.zeros(1, 2, V)
    logits[0, 0, 7] = 60.0
    logits[0, 1, 11] = 60.0
    z, a = residual_state(logits, E)
    assert (a < 1e-3).all()  # a confident prediction leaves almost no residual weight
    torch.testing.assert_close(z[0, 0], E[7])
    torch.testing.assert_close(z[0, 1], E[11])


def test_residual_state_two_token_vocab_by_hand():
    # logits [0, ln 3] -> p = [1/4, 3/4]; temperature 2 on [0, 2 ln 3] gives the same p
    E = torch.tensor([[1.0, -2.0], [4.0, 0.5]])
    H = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    for logits, T in ((torch.tensor([[[0.0, math.log(3.0)]]]), 1.0),
                      (torch.tensor([[[0.0, 2 * math.log(3.0)]]]), 2.0)):
        z, a = residual_state(logits, E, temperature=T)
        torch.testing.assert_close(a, torch.tensor([[H / math.log(2)]]))
        torch.testing.assert_close(z, torch.tensor([[[0.25 * 1 + 0.75 * 4, 0.25 * -2 + 0.75 * 0.5]]]))


def test_residual_state_z_is_p_times_codebook():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, V, generator=g) * 3
    E = torch.randn(V, 8, generator=g)
    z, a = residual_state(logits, E, temperature=0.7)
    p = torch.softmax(logits / 0.7, -1)
    torch.testing.assert_close(z, p @ E)
    torch.testing.assert_close(a, -(p * p.log()).sum(-1) / math.log(V))


def test_rcd_input_by_hand():
    model = tiny_model()
    tok, pos, _ = block_inputs(batch=1)
    z = torch.randn(1, P + L, 32)
    a = torch.full((1, P + L), 0.25)
    with torch.no_grad():
        e = model.embed(tok, pos, **residual_kw(tok, "rcd", z=z, a=a))
    E = model.model.embed_tokens.weight.detach()
    i = P + 1  # an unresolved (masked) position
    torch.testing.assert_close(e[0, i], 0.75 * E[MASK] + 0.25 * z[0, i])
    j = P + 3
    torch.testing.assert_close(e[0, j], 0.75 * E[MASK] + 0.25 * z[0, j])


@pytest.mark.parametrize("mode", ["rcd", "adapter"])
def test_resolved_positions_are_never_changed(mode):
    model = tiny_model(adapter_dim=16)
    train_adapter(model)
    tok, pos, _ = block_inputs()
    z = torch.randn(2, P + L, 32)
    a = torch.rand(2, P + L)
    unresolved = tok == MASK
    with torch.no_grad():
        plain = model.embed(tok, pos)
        e = model.embed(tok, pos, **residual_kw(tok, mode, z=z, a=a, unresolved=unresolved))
    assert torch.equal(e[~unresolved], plain[~unresolved])
    assert not torch.allclose(e[unresolved], plain[unresolved])


def test_adapter_input_by_hand():
    model = tiny_model(adapter_dim=16)
    train_adapter(model)
    tok, pos, _ = block_inputs(batch=1)
    z = torch.randn(1, P + L, 32)
    with torch.no_grad():
        e = model.embed(tok, pos, **residual_kw(tok, "adapter", z=z))
        E = model.model.embed_tokens.weight
        i = P + 1
        expect = E[MASK] + 0.7 * model.model.residual_adapter(z[0, i])
    torch.testing.assert_close(e[0, i], expect)


def test_unknown_mode_raises():
    model = tiny_model(adapter_dim=16)
    tok, pos, mask = block_inputs()
    with pytest.raises(ValueError, match="unknown residual mode"):
        model(tok, pos, mask, **residual_kw(tok, "soft"))
    with pytest.raises(ValueError, match="unknown residual mode"):
        residual_inputs(torch.zeros(1, 2, 4), torch.zeros(4), torch.zeros(1, 2, 4), torch.zeros(1, 2),
                        torch.ones(1, 2, dtype=torch.bool), "bogus", None, 1.0)


def test_adapter_mode_without_adapter_raises():
    model = tiny_model(adapter_dim=0)
    tok, pos, mask = block_inputs()
    with pytest.raises(ValueError, match="adapter_dim"):
        model(tok, pos, mask, **residual_kw(tok, "adapter"))


def test_rcd_mode_without_mask_id_raises():
    model = tiny_model()
    tok, pos, mask = block_inputs()
    kw = residual_kw(tok, "rcd")
    kw["mask_id"] = None
    with pytest.raises(ValueError, match="mask_id"):
        model(tok, pos, mask, **kw)


def test_adapter_mode_stops_gradient_into_z():
    model = tiny_model(adapter_dim=16)
    train_adapter(model)  # nonzero down_proj: without stopgrad, z would get a nonzero gradient
    model.train()
    tok, pos, mask = block_inputs()
    z = torch.randn(2, P + L, 32, requires_grad=True)
    model(tok, pos, mask, **residual_kw(tok, "adapter", z=z)).sum().backward()
    assert z.grad is None
    # the adapter itself still learns from the same loss
    assert model.model.residual_adapter.gate_proj.weight.grad.abs().sum() > 0
    assert model.model.residual_adapter.down_proj.weight.grad.abs().sum() > 0


def test_residual_state_banned_tokens_give_no_nan():
    # the engine bans tokens with -inf logits; 0 * log 0 must count as 0, not NaN
    E = torch.randn(4, 3)
    logits = torch.tensor([[[0.0, math.log(3.0), -math.inf, -math.inf]]])
    z, a = residual_state(logits, E)
    H = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(a, torch.tensor([[H / math.log(4)]]))
    torch.testing.assert_close(z[0, 0], 0.25 * E[0] + 0.75 * E[1])
