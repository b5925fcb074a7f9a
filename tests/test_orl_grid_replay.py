"""ORL's replay on a converted checkpoint (absolute grid, HF tokenizer with Gemma's special ids, shifted
read-out, sliding-window layers): every traced state, replayed in the packed staircase rows, gives the
logits the engine computed for it; the same states rebuilt in the prompt_block layout do not (so the
check can fail). And the objective runs the head only at the unresolved positions it reads, a chunk at
a time, with the loss and gradients of the whole-logits computation, keeping nothing vocabulary-wide."""
from __future__ import annotations

import pytest
import torch

from converted_fixture import EXTRA_EOS, VOCAB, converted_checkpoint
from test_convert import HeadOutputs, V  # counts the rows of every vocabulary-wide matmul output
from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine, decode
from orl.engine.trace import TraceRecorder
from orl.model.vocab import special_ids
from orl.train.losses import aec_loss, gated_ce, kl_anchor, normalized_entropy, state_entropy
from orl.train.objective import LossWeights, orl_loss, replay_logits
from orl.train.orl import base_layout, with_adapter
from orl.train.replay import build_batch, make_unit, pack
from orl.train.rollout import Rollout

assert VOCAB == V  # the fixture model is as wide as HeadOutputs counts

pytestmark = pytest.mark.usefixtures("one_thread")

# prompt lengths 4, 5, 6, 7 with <bos>: grid tails 0, 1, 2, 3 of a block of 4, in one batch
PROMPTS = ["abc", "abcd", "ab cd", "x = 12"]


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return converted_checkpoint(tmp_path_factory.mktemp("conv"))


def adapter_model(conv):
    model, tok, manifest = load_checkpoint(conv)
    model = with_adapter(model, 16, 1.0)
    torch.nn.init.normal_(model.model.residual_adapter.down_proj.weight, std=0.3)  # make the adapter matter
    return model.eval(), tok, manifest


def traced_rollouts(model, tok, cfg, monkeypatch):
    """Rollouts of PROMPTS (2 each), every trace record carrying the logits the engine computed [L, V]."""
    seen = []
    for name in ("block_forward", "fused_forward"):
        real = getattr(decode, name)

        def wrapped(*a, _real=real, **kw):
            seen.append(_real(*a, **kw).clone())
            return seen[-1]
        monkeypatch.setattr(decode, name, wrapped)
    real_after = TraceRecorder.after

    def after(self, st, block):
        before = [len(r) for r in self.rows]
        real_after(self, st, block)
        for b, rows in enumerate(self.rows):
            if len(rows) > before[b]:
                rows[-1].logits = seen[-1][b]
    monkeypatch.setattr(TraceRecorder, "after", after)
    prompts = [tok.encode(p) for p in PROMPTS for _ in range(2)]
    gens = Engine(model, tok).generate_ids(prompts, cfg, trace=True, seeds=list(range(len(prompts))))
    return [Rollout(None, g, True, 1.0) for g in gens]


def replayed(model, tok, rs, cfg, layout):
    ids = special_ids(tok, model.args.vocab_size)
    units = [make_unit(r, cfg.block_len, ids.eos, model.args.dim, 0.5, layout, cfg.max_new_tokens) for r in rs]
    rows = pack(units, 10_000)
    b = build_batch(units, rows, ids.pad)
    with torch.no_grad():
        logits = replay_logits(model, b, cfg.residual, ids)
    return units, rows, logits


def max_gap(rs, units, rows, logits, cfg) -> tuple[float, int]:
    """Largest |replay - engine| over every state's answer positions (finite logits), and how many states."""
    worst, n = 0.0, 0
    for r_i, row in enumerate(rows):
        off = 0
        for i in row:
            u, tail = units[i], len(rs[i].gen.prompt_ids) % cfg.block_len
            for s, rec in enumerate(rs[i].gen.trace, start=1):
                at = (u.state == s).nonzero().squeeze(-1)
                k = at.numel()
                ans = torch.arange(k) >= (tail if rec.block == 0 else 0)  # not the prompt tail
                got, want = logits[r_i, at + off][ans], rec.logits[:k][ans]
                assert got.shape != want.shape or torch.equal(torch.isinf(got), torch.isinf(want))  # banned ids
                fin = torch.isfinite(want)
                if fin.any():  # a wrong layout can place a state past the unit's end: nothing to compare
                    worst, n = max(worst, float((got[fin] - want[fin]).abs().max())), n + 1
            off += u.length
    return worst, n


@pytest.mark.parametrize("residual", ["adapter", "off"])
def test_replay_reproduces_the_engine_logits_on_the_grid(conv, residual, monkeypatch):
    model, tok, manifest = adapter_model(conv)
    assert manifest["layout"] == "absolute_grid" and model.args.shift_logits and tok.bos_id == 2
    assert (tok.mask_id, tok.eos_id, tok.pad_id, tok.vocab_size, tok.eos_ids) == (4, 1, 0, 261, (1, EXTRA_EOS))
    # the trainer's rollout settings: block length and layout from the checkpoint, not the preset
    cfg = base_layout(manifest, DecodeConfig(block_len=16, max_new_tokens=8, threshold=0.3, temperature=0.8,
                                             residual=residual))
    assert (cfg.block_len, cfg.layout) == (4, "absolute_grid")
    rs = traced_rollouts(model, tok, cfg, monkeypatch)
    assert {len(r.gen.prompt_ids) % 4 for r in rs} == {0, 1, 2, 3}
    units, rows, logits = replayed(model, tok, rs, cfg, "absolute_grid")
    gap, n = max_gap(rs, units, rows, logits, cfg)
    assert n > 3 * len(rs)  # several states per rollout, the last block cut at max_new_tokens for tails 1-3
    assert gap < 1e-4, gap  # fp32, another attention width and batch: far below any decision
    # the same states rebuilt in the prompt_block layout (prompt = one bidirectional block, answers
    # after the whole prompt): other keys and positions, other logits
    units, rows, logits = replayed(model, tok, rs, cfg, "prompt_block")
    assert max_gap(rs, units, rows, logits, cfg)[0] > 1e-2


def unchunked_loss(model, b, ids, w, ref_model):
    """The objective from whole [N, V] logits of the unresolved positions and the loss functions of
    orl.train.losses, as it was computed before the chunked head."""
    sel = b.unresolved
    lg = replay_logits(model, b, "adapter", ids, at=sel)
    resp, ones = b.response[sel], torch.ones(int(sel.sum()), dtype=torch.bool)
    l_pred = gated_ce(lg, b.targets[sel], ones, resp, b.n_responses)
    h_state = state_entropy(normalized_entropy(lg), ones, b.state_id[sel], b.n_states)
    l_aec = aec_loss(h_state, b.pair_src, b.pair_next, b.pair_response, b.n_responses, w.rho)
    l_kl = lg.new_zeros(())
    if ref_model is not None:
        with torch.no_grad():
            ref = replay_logits(ref_model, b, "adapter", ids, at=sel)
        l_kl = kl_anchor(lg, ref, b.confident[sel], resp, b.n_responses, w.kl_cap)
    return l_pred + w.lambda_aec * l_aec + w.lambda_kl * l_kl


def test_objective_reads_out_unresolved_positions_chunk_by_chunk(conv, monkeypatch):
    model, tok, manifest = adapter_model(conv)
    cfg = base_layout(manifest, DecodeConfig(max_new_tokens=8, threshold=0.3, temperature=0.8, residual="adapter"))
    rs = traced_rollouts(model, tok, cfg, monkeypatch)
    ids = special_ids(tok, model.args.vocab_size)
    units = [make_unit(r, 4, ids.eos, model.args.dim, 0.0, cfg.layout, cfg.max_new_tokens) for r in rs]  # all anchored
    b = build_batch(units, pack(units, 10_000), ids.pad)
    n_unres = int(b.unresolved.sum())
    assert 0 < n_unres < b.tokens.numel() // 2 and b.confident.any()  # clean and resolved positions: the rest
    with torch.no_grad():
        full = replay_logits(model, b, "adapter", ids)
        at = replay_logits(model, b, "adapter", ids, at=b.unresolved)
    torch.testing.assert_close(at, full[b.unresolved], atol=1e-5, rtol=0)  # the same logits, row-major
    w = LossWeights(lambda_aec=1.0, rho=0.25, lambda_kl=0.1, kl_cap=0.05)  # a cap some positions reach
    stale = with_adapter(load_checkpoint(conv)[0], 16, 1.0, seed=1).eval()  # other weights: KL > 0
    torch.nn.init.normal_(stale.model.residual_adapter.down_proj.weight, std=0.3)
    for ref in (None, stale):
        model.zero_grad()
        unchunked_loss(model, b, ids, w, ref).backward()
        want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        weights = {q.untyped_storage().data_ptr() for q in model.parameters()}
        saved = []

        def keep(x):  # activations autograd keeps for backward (parameters and their views aside)
            if x.untyped_storage().data_ptr() not in weights:
                saved.append(tuple(x.shape))
            return x
        with HeadOutputs() as seen:
            with torch.autograd.graph.saved_tensors_hooks(keep, lambda x: x):
                loss, parts = orl_loss(model, b, "adapter", ids, w, ref_model=ref, chunk=16)
            loss.backward()
        # the head runs 16 positions at a time (forward, the reference's, backward's recomputation), and
        # nothing vocabulary-wide is kept between forward and backward
        assert seen.rows and max(seen.rows) == 16 and sum(seen.rows) >= 2 * n_unres
        assert saved and not [s for s in saved if VOCAB in s], saved
        with torch.no_grad():
            assert float(unchunked_loss(model, b, ids, w, ref)) == pytest.approx(float(loss), abs=1e-6)
        assert (float(parts["kl"]) > 0) == (ref is not None)
        for n, p in model.named_parameters():
            if n in want:
                torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=1e-5, msg=n)
