"""orl.model.head.VocabHead: the CPU product it picks for a few rows equals F.linear's (up to summation order)
for every input layout a decoder passes, and it stays a plain Linear to every transform (state dict, type)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from orl.model.head import SKINNY_MIN_VOCAB, VocabHead


@pytest.mark.parametrize("shape", [(1, 1), (1, 3), (2, 2), (1, 6), (3, 2), (1, 7), (5,), (2, 8)])
def test_every_row_count_and_layout_matches_linear(shape):
    torch.manual_seed(0)
    head = VocabHead(16, SKINNY_MIN_VOCAB)
    h = torch.randn(*shape, 16)
    got = head(h)
    assert got.shape == (*shape, SKINNY_MIN_VOCAB) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(h, head.weight), rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), F.linear(h, head.weight).argmax(-1))


def test_the_w_h_product_runs_for_few_fp32_rows_only(monkeypatch):
    """Which product runs: F.linear is replaced by a marker, so a shape that should take W h^T and does not
    fails; half dtypes (where h W^T is the faster) and 1 or 8 rows take F.linear."""
    import orl.model.head as hd

    calls = []
    monkeypatch.setattr(hd.F, "linear", lambda h, w: calls.append(tuple(h.shape)) or h @ w.T)
    head = VocabHead(16, SKINNY_MIN_VOCAB)
    base = torch.randn(4, 32)[:, ::2]              # non-contiguous rows
    for h in (base, base[None]):
        torch.testing.assert_close(head(h), h @ head.weight.T, rtol=1e-5, atol=1e-5)
    assert calls == []
    head(torch.randn(1, 16))
    head(torch.randn(8, 16))
    head.to(torch.bfloat16)(torch.randn(3, 16, dtype=torch.bfloat16))
    assert calls == [(1, 16), (8, 16), (3, 16)]


def test_it_is_a_linear_with_the_same_state():
    head = VocabHead(4, 10)
    assert isinstance(head, nn.Linear) and head.bias is None and list(head.state_dict()) == ["weight"]
