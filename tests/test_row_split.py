"""A separate verifier for self-speculative decoding (orl.model.row_split): the clean rows run the verifier's
weights and the draft rows the drafter's, so the fused decoder emits exactly the verifier's greedy tokens
(not the drafter's own AR path) while the drafter's drafts set the forwards."""
import copy
from dataclasses import replace

import pytest
import torch
from torch import nn

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.model import Transformer
from orl.model.row_split import Cut, RowSplit, RowSplitError, draft_rows_from, has_verifier, verify_with
from test_self_draft import BASE, PROMPTS

pytestmark = pytest.mark.usefixtures("one_thread")


def perturbed(model: Transformer, scale: float, seed: int = 0) -> Transformer:
    """A copy with every weight scaled by (1 + scale * noise): the same architecture, another AR path."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.mul_(1 + scale * torch.randn(p.shape, generator=g))
    return out


@pytest.fixture(scope="module")
def models():
    drafter, tok, manifest = load_checkpoint(BASE)
    verifier = perturbed(drafter, 0.15)
    split = verify_with(copy.deepcopy(drafter), verifier)
    return drafter, verifier, split, tok, manifest


def test_row_split_unit_by_hand():
    """Rows before the cut go through the clean module, the rest through the draft one; no cut: all clean."""
    a, b, cut = nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False), Cut()
    with torch.no_grad():
        a.weight.copy_(torch.tensor([[1.0, 0.0]]))
        b.weight.copy_(torch.tensor([[0.0, 1.0]]))
    unit = RowSplit(a, b, cut)
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])                   # [B=1, T=3, 2]
    assert unit(x).flatten().tolist() == [1.0, 3.0, 5.0]
    cut.at = 1
    assert unit(x).flatten().tolist() == [1.0, 4.0, 6.0]
    cut.at = 0
    assert unit(x).flatten().tolist() == [2.0, 4.0, 6.0]
    assert unit.weight is a.weight


def test_clean_rows_are_the_verifiers_and_draft_rows_the_drafters(models):
    """One forward with the draft rows from row c, each half seeing only itself: rows < c are the verifier's
    logits for them alone, rows >= c the drafter's for them alone (causal within each half)."""
    drafter, verifier, split, tok, _ = models
    x = torch.tensor([tok.encode("cumsum:87734764=8,15,22")])
    T, c = x.shape[1], 9
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (k <= q) & ((q < c) == (k < c))                                     # two causal halves
    pos = torch.cat([torch.arange(c), torch.arange(T - c)])[None]
    with torch.no_grad(), draft_rows_from(split, c):
        got = split(x, pos, mask[None])[0]
    with torch.no_grad():
        clean = verifier(x[:, :c], pos[:, :c], mask[None, :c, :c])[0]
        draft = drafter(x[:, c:], pos[:, c:], mask[None, c:, c:])[0]
        drafter_clean = drafter(x[:, :c], pos[:, :c], mask[None, :c, :c])[0]
    torch.testing.assert_close(got[:c], clean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[c:], draft, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(clean, drafter_clean, atol=1e-3)  # the two models do differ
    assert split.row_cut.at is None  # the cut holds for one forward only


@pytest.mark.parametrize("draft", ["fused", "diffusion"])
def test_the_output_is_the_verifiers_greedy_path(models, draft):
    """Self-speculative decoding with the split model emits the verifier's plain greedy tokens exactly, not
    the drafter's own AR path (which differs on some prompt, so this can fail), and its drafts are accepted."""
    drafter, verifier, split, tok, manifest = models
    plain = ARConfig(max_new_tokens=32)
    spec = ARConfig(max_new_tokens=32, spec_tokens=4, spec_draft=draft)
    want = ARDecoder(verifier, tok, manifest=manifest).generate(PROMPTS, plain)
    own = ARDecoder(drafter, tok, manifest=manifest).generate(PROMPTS, plain)
    dec = ARDecoder(split, tok, manifest=manifest)
    got = [dec.generate([p], spec)[0] for p in PROMPTS]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert any(w.token_ids != o.token_ids for w, o in zip(want, own))
    tokens, forwards = sum(len(g.token_ids) for g in got), sum(g.step_forwards for g in got)
    assert forwards < tokens, (tokens, forwards)


def test_refuses_another_architecture_and_a_second_verifier(models):
    drafter, verifier, split, _, _ = models
    other = Transformer(replace(drafter.args, ffn_dim=drafter.args.ffn_dim * 2))
    with pytest.raises(RowSplitError, match="ffn_dim"):
        verify_with(copy.deepcopy(drafter), other)
    with pytest.raises(RowSplitError, match="already"):
        verify_with(split, verifier)
    assert has_verifier(split) and not has_verifier(drafter)


def test_draft_rows_from_is_a_no_op_without_a_verifier_and_resets_on_error(models):
    drafter, _, split, _, _ = models
    with draft_rows_from(drafter, 3):
        pass
    with pytest.raises(RuntimeError):
        with draft_rows_from(split, 3):
            raise RuntimeError("boom")
    assert split.row_cut.at is None


def test_equal_units_are_shared_and_a_low_rank_delta_keeps_the_verifiers_tokens(models):
    """share_equal: a unit the two hold equal is the verifier's own module. low_rank_drafts: the draft rows
    read W x + B (A x); at full rank that is the drafter's logits, and at any rank the output tokens stay
    the verifier's (only the drafts change)."""
    from orl.model.draft_delta import DraftDelta, low_rank_drafts

    drafter, verifier, _, tok, manifest = models
    d = copy.deepcopy(drafter)
    d.model.layers[0].mlp.up_proj.weight.data.copy_(verifier.model.layers[0].mlp.up_proj.weight)
    shared = verify_with(d, verifier)
    assert shared.model.layers[0].mlp.up_proj is verifier.model.layers[0].mlp.up_proj
    delta, split = verify_with(copy.deepcopy(drafter), verifier), verify_with(copy.deepcopy(drafter), verifier)
    info = low_rank_drafts(delta, 10_000)
    assert info["units"] > 0 and info["energy_kept"] > 0.999
    assert isinstance(delta.model.layers[0].self_attn.q_proj, DraftDelta)
    x = torch.tensor([tok.encode("cumsum:87734764=8,15,22")])
    T, c = x.shape[1], 9
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None]
    with torch.no_grad(), draft_rows_from(delta, c):
        got = delta(x, torch.arange(T)[None], mask)
    with torch.no_grad(), draft_rows_from(split, c):
        want = split(x, torch.arange(T)[None], mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert low_rank_drafts(split, 2)["energy_kept"] < 0.9
    plain, spec = ARConfig(max_new_tokens=24), ARConfig(max_new_tokens=24, spec_tokens=4, spec_draft="fused")
    ref = ARDecoder(verifier, tok, manifest=manifest).generate(PROMPTS[:3], plain)
    dec = ARDecoder(split, tok, manifest=manifest)
    assert [dec.generate([p], spec)[0].token_ids for p in PROMPTS[:3]] == [r.token_ids for r in ref]


def test_each_forward_is_cut_where_its_draft_rows_start(models):
    """fused_verify cuts at its T verify rows, diffusion_draft at 1 (its clean last token), the prefill not at
    all; nested cuts restore the outer one."""
    from orl.engine.self_draft import diffusion_draft, fused_verify, scratch_slots

    _, _, split, tok, manifest = models
    seen = []
    hook = split.model.layers[0].mlp.up_proj.register_forward_pre_hook(
        lambda mod, args: seen.append((mod.cut.at, args[0].shape[1])))
    try:
        dec = ARDecoder(split, tok, manifest=manifest)
        prompt, draft = tok.encode("cumsum:8773476="), tok.encode("8,15,22")
        st = dec.setup([prompt], ARConfig(max_new_tokens=16), extra=scratch_slots(len(draft), 16))
        assert seen and all(c is None for c, _ in seen)  # the prefill: the verifier's alone
        seen.clear()
        fused_verify(split, st, len(prompt) - 1, prompt[-1:] + draft, tok.encode("9.3"), len(draft), tok.mask_id,
                     0.0, 0)
        assert [c for c, _ in seen] == [1 + len(draft)] and seen[0][1] > 1 + len(draft)
        seen.clear()
        diffusion_draft(split, st, len(prompt) - 1, prompt[-1], 4, tok.mask_id)
        assert seen == [(1, 5)]
    finally:
        hook.remove()
    with draft_rows_from(split, 3):
        with draft_rows_from(split, 5):
            assert split.row_cut.at == 5
        assert split.row_cut.at == 3
    assert split.row_cut.at is None


def test_tensors_outside_the_units_must_be_the_verifiers(models):
    """What a split cannot reach runs on the clean rows too: a quantized drafter's linears (buffers), attention's
    logn_scale. Different from the verifier's, they are refused by name, not left to move the verify rows."""
    from orl.model import ModelArgs
    from orl.quant import quantize

    drafter, verifier, _, _, _ = models
    with pytest.raises(RowSplitError, match="drafter torch.int8|quantized model on one side"):
        verify_with(quantize(copy.deepcopy(drafter), "int8"), verifier)
    args = ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                     max_seq_len=64, attn_logn=True)
    a = Transformer(args)
    b = copy.deepcopy(a)
    verify_with(copy.deepcopy(a), b)  # equal: accepted
    with torch.no_grad():
        b.model.layers[0].self_attn.logn_scale.mul_(3)
    with pytest.raises(RowSplitError, match="logn_scale"):
        verify_with(a, b)
    with pytest.raises(RowSplitError, match="bfloat16"):
        verify_with(copy.deepcopy(drafter).to(torch.bfloat16), verifier)
