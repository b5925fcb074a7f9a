"""Routed experts (orl.model.moe): the grouped form equals the all-experts form, costs what the chosen
experts cost, reads no host value; the LLaDA2 sigmoid router against the published gate's equations."""
import pytest
import torch

from orl.model.args import ModelArgs
from orl.model.moe import MoE
from test_no_sync import NoHostSync

LLADA2 = dict(router="sigmoid", router_bias=True, n_group=4, topk_group=2, routed_scaling=2.5,
              shared_expert_ffn_dim=16, n_experts_per_tok=3)


def moe(**kw) -> MoE:
    torch.manual_seed(0)
    base = dict(vocab_size=32, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=32,
                n_experts=8, n_experts_per_tok=2, moe_ffn_dim=16)
    m = MoE(ModelArgs(**{**base, **kw})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        if m.gate.expert_bias is not None:
            m.gate.expert_bias.copy_(torch.randn(m.gate.expert_bias.shape) * 0.2)
    return m


def dense(m: MoE, x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    out = m.dense(flat, *m.gate.route(flat))
    if m.shared_expert is not None:
        out = out + m.shared_expert(flat)
    return out.view(x.shape)


@pytest.mark.parametrize("kw", [dict(), dict(norm_topk_prob=False), LLADA2, dict(LLADA2, n_experts_per_tok=1)])
def test_grouped_equals_dense(kw):
    m = moe(**kw)
    x = torch.randn(3, 11, 32)
    calls = []
    real = torch._grouped_mm

    def spy(a, b, offs):
        calls.append(a.shape[0])
        return real(a, b, offs=offs)

    with torch.no_grad():
        want = dense(m, x)
        torch._grouped_mm = spy
        try:
            got = m(x)
        finally:
            torch._grouped_mm = real
    # two grouped matmuls (gate|up, down) over the N * k chosen (token, expert) pairs, not N * E
    assert calls == [3 * 11 * m.k] * 2
    assert want.abs().max() > 0.1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_grouped_reads_no_host_value():
    m = moe(**LLADA2)
    x = torch.randn(2, 5, 32)
    with torch.no_grad(), NoHostSync() as mode:
        m(x)
    assert torch.ops.aten._grouped_mm in mode.ops


def test_pack_keeps_names_and_storage():
    m = moe()
    names = set(m.state_dict())
    assert "experts.7.down_proj.weight" in names and "gate.weight" in names
    gate_up, down = m._packed
    assert m.experts[3].up_proj.weight.data_ptr() == gate_up[3, 16:].data_ptr()
    assert m.experts[5].down_proj.weight.data_ptr() == down[5].data_ptr()


def test_loading_and_casting_restack():
    m, other = moe(), moe(**{})
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-1.5)
    x = torch.randn(4, 32)
    for assign in (False, True):
        m.load_state_dict(other.state_dict(), assign=assign)
        with torch.no_grad():
            torch.testing.assert_close(m(x), dense(other, x), atol=1e-5, rtol=1e-5)
    m = m.to(torch.bfloat16)
    with torch.no_grad():
        assert m._can_group(x.bfloat16()) and m._packed[0].dtype == torch.bfloat16
        torch.testing.assert_close(m(x.bfloat16()).float(), dense(m, x.bfloat16()).float(), atol=0.05, rtol=0.05)


def test_dense_path_where_grouping_does_not_apply():
    m = moe()
    x = torch.randn(4, 32)
    assert not m._can_group(x)  # gradients are recorded: torch._grouped_mm has no CPU backward
    m(x).sum().backward()
    assert m.experts[0].gate_proj.weight.grad is not None
    with torch.no_grad():
        assert m._can_group(x)
        m.experts[2].up_proj.weight = torch.nn.Parameter(torch.zeros(16, 32))  # no longer the stack
        assert not m._can_group(x)
        torch.testing.assert_close(m(x), dense(m, x))
    odd = moe(moe_ffn_dim=10)  # 40-byte rows break _grouped_mm's 16-byte stride rule
    assert odd._packed is None
    with torch.no_grad():
        torch.testing.assert_close(odd(x), dense(odd, x))


def published_llada2_gate(x, weight, bias, k, n_group, topk_group, scale):
    """LLaDA2MoeGate, token by token from the published equations (modeling_llada2_moe.py)."""
    out_w, out_i = [], []
    for row in x.float():
        scores = torch.sigmoid(weight.float() @ row)
        biased = scores + bias
        size = len(scores) // n_group
        group_score = [sorted(biased[g * size:(g + 1) * size].tolist())[-2:] for g in range(n_group)]
        best = sorted(range(n_group), key=lambda g: -sum(group_score[g]))[:topk_group]
        allowed = [e for e in range(len(scores)) if e // size in best]
        chosen = sorted(allowed, key=lambda e: -biased[e].item())[:k]
        w = scores[chosen]
        w = w / (w.sum() + 1e-20) if k > 1 else w
        out_w.append(w * scale)
        out_i.append(chosen)
    return torch.stack(out_w), torch.tensor(out_i)


def test_sigmoid_router_matches_published_gate():
    m = moe(**LLADA2)
    x = torch.randn(9, 32)
    with torch.no_grad():
        w, i = m.gate.route(x)
    rw, ri = published_llada2_gate(x, m.gate.weight, m.gate.expert_bias, 3, 4, 2, 2.5)
    order = i.argsort(-1)  # the same set; topk orders ties either way
    assert torch.equal(i.gather(-1, order).sort(-1).values, ri.sort(-1).values)
    torch.testing.assert_close(w.sort(-1).values, rw.sort(-1).values)


def test_router_options_are_checked():
    with pytest.raises(ValueError, match="n_group"):
        ModelArgs(n_experts=8, moe_ffn_dim=8, n_group=3)
    with pytest.raises(ValueError, match="topk_group"):
        ModelArgs(n_experts=8, moe_ffn_dim=8, n_group=4, topk_group=1, n_experts_per_tok=3)
    with pytest.raises(ValueError, match="router"):
        ModelArgs(router="relu")
