"""Replay of captured states: equals the rollout step, packing preserves every state, the objective
moves the model the intended way."""
import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.model.vocab import special_ids
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer
from orl.train.objective import LossWeights, orl_loss, replay_logits
from orl.train.replay import build_batch, make_unit, pack
from orl.train.rollout import collect, sample_prompts
from orl.train.orl import with_adapter

TOK = CharTokenizer()
L = 8


def tiny_model(seed=0, shift=False) -> Transformer:
    torch.manual_seed(seed)
    m = Transformer(ModelArgs(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                              ffn_dim=64, max_seq_len=256, shift_logits=shift))
    m = with_adapter(m, 16, 1.0)
    torch.nn.init.normal_(m.model.residual_adapter.down_proj.weight, std=0.3)  # make the adapter matter
    return m.eval()


def rollouts(model, residual, n_prompts=3, group=2):
    eng = Engine(model, TOK)
    cfg = DecodeConfig(block_len=L, max_new_tokens=24, threshold=0.05, temperature=0.8, residual=residual)
    rs = collect(eng, sample_prompts(("add", "sort", "long"), n_prompts, "test"), group, cfg, seed=3)
    for r in rs:
        r.verified = True  # a random model is never right; the replay machinery does not care
    return rs


def units_of(model, rs):
    ids = special_ids(TOK, model.args.vocab_size)
    return ids, [make_unit(r, L, ids.eos, model.args.dim, kl_conf=0.5) for r in rs]


@pytest.mark.parametrize("residual,shift", [("adapter", False), ("rcd", False), ("off", False),
                                            ("adapter", True), ("off", True)])
def test_replay_reproduces_rollout_steps(residual, shift):
    # shift: each token is read off the position before it; a block's first token off the clean copy
    # of the previous block's last position, which the engine carried from its commit forward
    model = tiny_model(shift=shift)
    rs = rollouts(model, residual)
    assert_replays(model, rs, residual)


def assert_replays(model, rs, residual):
    """Every captured state of every rollout, replayed packed, gives the entropies and confidences the
    engine saw."""
    ids, units = units_of(model, rs)
    rows = pack(units, 600)
    b = build_batch(units, rows, ids.pad)
    with torch.no_grad():
        logits = replay_logits(model, b, residual, ids)
    n_checked = 0
    for r_i, row in enumerate(rows):
        off = 0
        for i in row:
            u = units[i]
            for s, rec in enumerate(rs[i].gen.trace, start=1):
                pos = (u.state == s).nonzero().squeeze(-1) + off
                p = torch.softmax(logits[r_i, pos], -1)
                ent = torch.special.entr(p).sum(-1)
                conf = p.gather(-1, rec.tokens[:, None]).squeeze(-1)
                m = rec.unresolved
                # fp32, different batch composition and attention width: 1e-4 is far below any decision
                torch.testing.assert_close(ent[m], rec.entropy[m], atol=1e-4, rtol=0)
                torch.testing.assert_close(conf[m], rec.confidence[m], atol=1e-4, rtol=0)
                n_checked += 1
            off += u.length
    assert n_checked > len(rs)  # several states per response, so multi-step blocks were replayed


def test_a_rollout_ended_by_a_stop_string_replays_and_is_not_supervised_past_it():
    """The engine committed tokens after the stop string inside the row's last block; the rollout drops
    them, so the states replay as decoded and the positions after the stop are no target (IGNORE)."""
    from orl.train.losses import IGNORE

    model = tiny_model()
    plain = rollouts(model, "off", n_prompts=1, group=1)[0]
    stop = plain.gen.text[10]  # a character of the second block
    eng = Engine(model, TOK)
    cfg = DecodeConfig(block_len=L, max_new_tokens=24, threshold=0.05, temperature=0.8, stop=(stop,))
    rs = collect(eng, [plain.sample], 1, cfg, seed=3)
    r = rs[0]
    cut = plain.gen.text.index(stop) + 1
    assert r.gen.stop == stop and r.gen.token_ids == plain.gen.token_ids[:cut]
    r.verified = True
    assert_replays(model, rs, "off")
    ids, (u,) = units_of(model, rs)
    n = len(r.gen.prompt_ids)
    last = u.block == u.block.max()  # the clean copy and the states of the stopped block
    answer_pos = u.pos - n
    assert (u.targets[last & (answer_pos >= cut)] == IGNORE).all()
    assert (u.targets[last & (answer_pos >= 0) & (answer_pos < cut)] >= 0).all()
    assert ((answer_pos >= cut) & last).any() and (u.targets[~last] >= 0).all()
    b = build_batch([u], pack([u], 600), ids.pad)
    loss, parts = orl_loss(model, b, "off", ids, LossWeights())
    assert torch.isfinite(loss) and parts["pred"] > 0


@pytest.mark.parametrize("shift", [False, True])
def test_packing_equals_unpacked_forward(shift):
    model = tiny_model(1, shift)
    rs = rollouts(model, "adapter", n_prompts=2)
    ids, units = units_of(model, rs)
    packed_rows = pack(units, 10_000)
    assert len(packed_rows) == 1 and len(packed_rows[0]) == len(units)
    packed = build_batch(units, packed_rows, ids.pad)
    alone = [build_batch([u], [[0]], ids.pad) for u in units]
    with torch.no_grad():
        lp = replay_logits(model, packed, "adapter", ids)[0]
        off = 0
        for i in packed_rows[0]:
            la = replay_logits(model, alone[i], "adapter", ids)[0]
            n = units[i].length
            torch.testing.assert_close(lp[off: off + n], la[:n], atol=1e-5, rtol=1e-5)
            assert torch.equal(packed.tokens[0, off: off + n], alone[i].tokens[0, :n])
            off += n


def test_pack_balances_and_rejects_oversize():
    model = tiny_model(2)
    ids, units = units_of(model, rollouts(model, "off", n_prompts=3))
    cap = max(u.length for u in units) * 2
    rows = pack(units, cap)
    assert sorted(i for r in rows for i in r) == list(range(len(units)))
    assert all(sum(units[i].length for i in r) <= cap for r in rows)
    with pytest.raises(ValueError, match="row_tokens"):
        pack(units, 5)


def test_objective_sharpens_and_fits():
    model = tiny_model(3)
    rs = rollouts(model, "adapter")
    ids, units = units_of(model, rs)
    b = build_batch(units, pack(units, 2000), ids.pad)
    w = LossWeights(lambda_aec=1.0, rho=0.25, lambda_kl=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(15):
        loss, parts = orl_loss(model, b, "adapter", ids, w)
        first = first or {k: v.item() for k, v in parts.items()}
        opt.zero_grad()
        loss.backward()
        opt.step()
    _, last = orl_loss(model, b, "adapter", ids, w)
    assert last["pred"].item() < first["pred"] * 0.9
    assert last["aec"].item() < first["aec"]


def test_certainty_forcing_term_reads_the_replayed_logits():
    """L_CF from orl_loss equals the entropy at the replayed positions whose argmax is the target, and training on
    it alone raises the probability of those argmaxes (the positions a threshold decoder would commit)."""
    from orl.train.losses import IGNORE, certainty_forcing, normalized_entropy
    model = tiny_model(4)
    rs = rollouts(model, "adapter")
    ids, units = units_of(model, rs)
    b = build_batch(units, pack(units, 2000), ids.pad)
    base = LossWeights(lambda_aec=0.0, lambda_kl=0.0)
    with torch.no_grad():
        loss0, parts0 = orl_loss(model, b, "adapter", ids, base)
        loss1, parts1 = orl_loss(model, b, "adapter", ids, LossWeights(lambda_aec=0.0, lambda_kl=0.0, lambda_cf=2.0))
        logits = replay_logits(model, b, "adapter", ids, at=b.unresolved)  # [N, V]
    targets, resp = b.targets[b.unresolved], b.response[b.unresolved]
    right = logits.argmax(-1) == targets
    assert right.any() and (~right & (targets != IGNORE)).any()  # both kinds of position occur
    want = certainty_forcing(normalized_entropy(logits), right, targets != IGNORE, resp, b.n_responses)
    torch.testing.assert_close(parts1["cf"], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss1, loss0 + 2.0 * want, atol=1e-5, rtol=1e-5)
    assert parts0["cf"] == parts1["cf"]  # logged whatever its weight
    # 10 steps with and without the term, from the same weights: it alone makes the right positions surer
    import copy
    sure = {}
    for lam in (0.0, 50.0):
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        for _ in range(10):
            loss, _ = orl_loss(m, b, "adapter", ids, LossWeights(lambda_aec=0.0, lambda_kl=0.0, lambda_cf=lam))
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            sure[lam] = normalized_entropy(replay_logits(m, b, "adapter", ids, at=b.unresolved))[right].mean()
    assert sure[50.0] < sure[0.0] - 0.01, sure  # measured 0.920 vs 0.945


def test_certainty_forcing_split_over_processes_sums_to_the_whole():
    """torchrun: each process's batch with norm = every process's response counts; the shares' losses and gradients
    add up to the one-process batch's (L_CF shares L_pred's count of responses)."""
    from orl.train.objective import response_counts
    model = tiny_model(5)
    rs = rollouts(model, "adapter")
    ids, units = units_of(model, rs)
    w = LossWeights(lambda_aec=1.0, lambda_kl=0.0, lambda_cf=3.0)

    def run(parts_of_units, norm=None):
        model.zero_grad()
        total, cf = 0.0, 0.0
        for us in parts_of_units:
            b = build_batch(us, pack(us, 2000), ids.pad)
            loss, parts = orl_loss(model, b, "adapter", ids, w, norm=norm)
            loss.backward()
            total, cf = total + loss.detach(), cf + parts["cf"]
        return total, cf, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    whole, cf_whole, g_whole = run([units])
    halves = [units[: len(units) // 2], units[len(units) // 2:]]
    norm = sum(response_counts(build_batch(us, pack(us, 2000), ids.pad)) for us in halves)
    split, cf_split, g_split = run(halves, norm)
    assert cf_whole > 0
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cf_split, cf_whole, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_split, g_whole):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
