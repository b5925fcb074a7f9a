"""orl.train.draft_rows: one packed forward gives, at every draft group, the logits of an uncached forward over
[x[0:c], m masks] in the fused self-draft's geometry (the one tests/test_fused_self_draft.py ties to
fused_verify), and at the clean tokens the plain causal forward's; targets and weights by hand; both loss terms
are the explicit weighted CE."""
import pytest
import torch
import torch.nn.functional as F

from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.train.draft_rows import anchors, answer_weights, draft_rows, loss_sums

pytestmark = pytest.mark.usefixtures("one_thread")

MASK, PAD, V = 3, 0, 64


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(ModelArgs(vocab_size=V, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=64,
                              max_seq_len=128, shift_logits=True, tie_embeddings=False))
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(std=p.shape[1] ** -0.5)
    return m.eval()


def uncached_group(model, x: list[int], c: int, m: int) -> torch.Tensor:
    """[m, V]: the logits of m masks after x[0:c], causal before them and bidirectional among them."""
    seq = torch.tensor([x[:c] + [MASK] * m])
    T = c + m
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (k <= q) | ((k >= c) & (q >= c))
    return model(seq, torch.arange(T)[None], mask[None])[0, c:]


def test_targets_and_weights_by_hand():
    x = list(range(10, 22))  # L = 12, the answer from position 5
    rows = draft_rows([x], [5], m=2, mask_id=MASK, pad_id=PAD)
    assert anchors(5, 12) == list(range(5, 11))
    L, G, m = 12, 6, 2
    assert rows.tokens.shape == (1, L + G * m)
    assert rows.tokens[0, L:].tolist() == [MASK] * (G * m)
    # group at c = 5: positions 5, 6 reading x[6], x[7]; the last (c = 10): x[11], then nothing (12 = L)
    assert rows.pos[0, L:L + 2].tolist() == [5, 6] and rows.targets[0, L:L + 2].tolist() == [16, 17]
    assert rows.pos[0, -2:].tolist() == [10, 11] and rows.targets[0, -2].item() == 21
    assert rows.weight[0, L:].tolist() == [1.0] * (G * m - 1) + [0.0]
    # the AR path: position i reads x[i + 1]; its term on the answer's tokens x[5:] only, apart from the draft's
    assert rows.targets[0, :L - 1].tolist() == x[1:]
    assert rows.weight[0, :L].tolist() == [0.0] * L
    ar = answer_weights(rows, [x], [5])
    assert ar[0, :L].tolist() == [0.0] * 4 + [1.0] * 7 + [0.0] and not ar[0, L:].any()
    # the group at c = 7 sees x[0:7] and its own two rows, nothing else; clean rows never see a group
    q = L + 2 * m
    assert rows.mask[0, q].nonzero().flatten().tolist() == list(range(7)) + [q, q + 1]
    assert not rows.mask[0, :L, L:].any()
    with pytest.raises(ValueError, match="start inside the sequence"):
        draft_rows([x], [0], 2, MASK, PAD)
    with pytest.raises(ValueError, match="at least one mask"):
        draft_rows([x], [5], 0, MASK, PAD)


def test_packed_groups_are_the_uncached_draft_forwards(model):
    torch.manual_seed(1)
    seqs = [torch.randint(4, V, (13,)).tolist(), torch.randint(4, V, (9,)).tolist()]  # two lengths: padding
    starts, m = [6, 4], 3
    rows = draft_rows(seqs, starts, m, MASK, PAD)
    with torch.no_grad():
        logits = model(rows.tokens, rows.pos, rows.mask)
        for b, (x, s) in enumerate(zip(seqs, starts)):
            L = len(x)
            causal = torch.ones(L, L, dtype=torch.bool).tril()
            plain = model(torch.tensor([x]), torch.arange(L)[None], causal[None])[0]
            torch.testing.assert_close(logits[b, :L], plain, atol=1e-5, rtol=1e-5)
            for g, c in enumerate(anchors(s, L)):
                q = L + g * m
                torch.testing.assert_close(logits[b, q:q + m], uncached_group(model, x, c, m), atol=1e-5, rtol=1e-5)


def test_loss_sums_are_the_weighted_ce_of_the_read_positions(model):
    """loss_sums: one forward, the draft term over rows.weight and the next-token term over answer_weights, each
    the explicit weighted CE of the positions that read them."""
    torch.manual_seed(2)
    seqs = [torch.randint(4, V, (11,)).tolist()]
    rows = draft_rows(seqs, [5], 2, MASK, PAD)
    ar = answer_weights(rows, seqs, [5])
    with torch.no_grad():
        draft, nxt, kl = loss_sums(model, rows, ar, chunk=4)
        logits = model(rows.tokens, rows.pos, rows.mask)[0]
        ce = F.cross_entropy(logits, rows.targets[0], reduction="none")
    torch.testing.assert_close(draft, (ce * rows.weight[0]).sum(), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(nxt, (ce * ar[0]).sum(), atol=1e-4, rtol=1e-5)
    assert draft > 0 and nxt > 0 and kl == 0  # no reference: no KL term


def test_kl_term_is_the_capped_reverse_kl_of_the_plain_causal_forwards(model):
    """With a reference, the third sum is sum over answer positions of min(KL(p_model || p_ref), cap), where both
    distributions are those of a plain causal forward over the sequence alone: two sequences of different lengths,
    so the shorter row's draft groups sit inside the columns the reference reads (and must not change it). Zero
    against itself, its gradient reaches the model, and the cap binds."""
    import copy

    torch.manual_seed(3)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    seqs = [torch.randint(4, V, (13,)).tolist(), torch.randint(4, V, (8,)).tolist()]
    starts = [6, 3]
    rows = draft_rows(seqs, starts, 3, MASK, PAD)
    ar = answer_weights(rows, seqs, starts)
    want = torch.zeros(())
    for x, s in zip(seqs, starts):
        T = len(x)
        causal = torch.ones(T, T, dtype=torch.bool).tril()[None]
        with torch.no_grad():
            lp = F.log_softmax(model(torch.tensor([x]), torch.arange(T)[None], causal)[0], -1)
            lq = F.log_softmax(ref(torch.tensor([x]), torch.arange(T)[None], causal)[0], -1)
        want += (lp.exp() * (lp - lq)).sum(-1)[s - 1:T - 1].sum()
    with torch.no_grad():
        _, _, kl = loss_sums(model, rows, ar, chunk=4, ref=ref, kl_cap=100.0)
        _, _, self_kl = loss_sums(model, rows, ar, chunk=4, ref=model)
        _, _, capped = loss_sums(model, rows, ar, chunk=4, ref=ref, kl_cap=1e-3)
    assert want > 0.1
    torch.testing.assert_close(kl, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(self_kl, torch.zeros(()), atol=1e-5, rtol=0)
    n_answer = sum(len(x) - s for x, s in zip(seqs, starts))
    torch.testing.assert_close(capped, torch.tensor(1e-3 * n_answer), atol=1e-6, rtol=1e-4)
    m = copy.deepcopy(model)
    m.zero_grad()
    loss_sums(m, rows, ar, chunk=4, ref=ref, kl_cap=100.0)[2].backward()
    assert m.lm_head.weight.grad.abs().sum() > 0 and m.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
