"""A rollout with no denoising state: Fast-dLLM v2's AR first token can resolve a block with no step
(orl.engine.engine: "no step for it"), so a row whose first token is EOS has an empty trace. Such a rollout
holds no unresolved position: it must replay as nothing (no state, no loss), not crash the update."""
import torch

from orl.engine import DecodeConfig
from orl.engine.sequence import Generation
from orl.eval.tasks.base import Sample
from orl.model.vocab import special_ids
from orl.train.objective import LossWeights, orl_loss
from orl.train.orl import ORLConfig, orl_update
from orl.train.replay import build_batch, make_unit, pack
from orl.train.rollout import Rollout
from tests.test_replay import L, TOK, rollouts, tiny_model

EOS = TOK.eos_id


def eos_only(prompt=(5, 6, 7)) -> Rollout:
    """The engine's record of a row whose AR first token was EOS: one token, no forward beyond the prefill."""
    g = Generation(list(prompt), [EOS], "", True, 1, 0, 0, 0.0, 0.0, [0], [])
    return Rollout(Sample("add", "train", 0, "p", "a"), g, verified=False)


def test_an_empty_trace_makes_a_unit_without_states():
    for mnt in (16, None):  # orl_update passes max_new_tokens; the default sizes the row from the answer
        u = make_unit(eos_only(), L, EOS, 32, kl_conf=0.9, max_new_tokens=mnt)
        assert u.tokens[:4].tolist() == [5, 6, 7, EOS]
        assert int(u.state.max()) == 0 and not u.unresolved.any() and u.pairs == []


def test_an_empty_rollout_adds_nothing_to_the_loss():
    model = tiny_model(3)
    rs = rollouts(model, "adapter", n_prompts=2, group=1)
    ids = special_ids(TOK, model.args.vocab_size)
    units = [make_unit(r, L, ids.eos, model.args.dim, kl_conf=0.5, max_new_tokens=24) for r in rs]
    empty = make_unit(eos_only(), L, ids.eos, model.args.dim, kl_conf=0.5, max_new_tokens=24)
    w = LossWeights()
    with torch.no_grad():
        alone, _ = orl_loss(model, build_batch(units, pack(units, 2000), ids.pad), "adapter", ids, w)
        both = units + [empty]
        mixed, _ = orl_loss(model, build_batch(both, pack(both, 2000), ids.pad), "adapter", ids, w)
    torch.testing.assert_close(mixed, alone, atol=1e-5, rtol=1e-5)


def test_an_update_whose_only_rollout_has_no_state_changes_nothing():
    """No rollout kept: the update replays rollouts[:1] at weight 0 (for DDP) and returns {}."""
    model = tiny_model(4)
    ids = special_ids(TOK, model.args.vocab_size)
    cfg = ORLConfig(rollout=DecodeConfig(block_len=L, max_new_tokens=16, residual="adapter"), adapter_dim=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    assert orl_update(model, opt, [], [eos_only()], cfg, cfg.rollout, ids, None) == {}
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_fast_dllm_v2_rollouts_of_one_token_blocks_have_no_state_and_replay():
    """Reachable through the engine today: blocks of 1 under fast_dllm_v2 are resolved by the AR token alone."""
    from orl.engine import Engine
    from orl.train.rollout import collect, sample_prompts

    model = tiny_model(0, shift=True)
    cfg = DecodeConfig(block_len=1, max_new_tokens=4, temperature=0.0, residual="adapter", rule="fast_dllm_v2",
                       small_block_size=1)
    (r,) = collect(Engine(model, TOK), sample_prompts(("add",), 1, "t"), 1, cfg, seed=0)
    assert r.gen.trace == [] and r.gen.n_tokens > 0
    ids = special_ids(TOK, model.args.vocab_size)
    u = make_unit(r, 1, ids.eos, model.args.dim, kl_conf=0.9, max_new_tokens=4)
    assert int(u.state.max()) == 0 and u.length == len(r.gen.prompt_ids) + 4
