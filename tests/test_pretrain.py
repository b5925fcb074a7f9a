"""Base-model recipe: batches, loss goes down, exact resume."""
import json

import pytest
import torch

from orl.model.vocab import special_ids
from orl.model import ModelArgs
from orl.tokenizer import CharTokenizer
from orl.train.batches import ar_batch, diffusion_batch
from orl.train.pretrain import PretrainConfig, pretrain

TOK = CharTokenizer()


def small_cfg(**kw) -> PretrainConfig:
    model = ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                      max_seq_len=160, learned_pos=True)
    base = dict(model=model, block_len=8, ar_steps=6, diffusion_steps=6, batch_size=8, warmup=2, lr=3e-3,
                eval_every=1000, eval_samples=2, save_every=3, bf16=False, threads=1)
    return PretrainConfig(**{**base, **kw})


def losses(log_path):
    return [json.loads(line)["loss"] for line in open(log_path)]


def test_ar_batch_layout():
    b = ar_batch([([5, 6, 7], [8, 9]), ([5], [8])], TOK.pad_id, TOK.eos_id)
    # row 0: 5 6 7 8 9 EOS -> inputs 5 6 7 8 9, targets 6 7 8 9 EOS; loss on 8 9 EOS only
    assert b.tokens[0].tolist() == [5, 6, 7, 8, 9]
    assert b.targets[0].tolist() == [6, 7, 8, 9, TOK.eos_id]
    assert b.weight[0].tolist() == [0, 0, 1, 1, 1]
    # row 1 is left padded: pad pad 5 8 EOS EOS; loss on 8 and the first EOS
    assert b.tokens[1].tolist() == [TOK.pad_id, TOK.pad_id, 5, 8, TOK.eos_id]
    assert b.weight[1].tolist() == [0, 0, 1, 1, 0]
    assert b.pos[1, 2:].tolist() == [0, 1, 2]
    assert not b.mask[1, 3, :2].any()  # pads are invisible


def test_diffusion_batch_masks_only_noisy_answer():
    ids = special_ids(TOK, 128)
    gen = torch.Generator().manual_seed(0)
    b = diffusion_batch([([5, 6], [7, 8, 9]), ([5, 6, 7], list(range(10, 20)))], 4, ids, gen)
    P, A = 3, 12  # longest prompt 3; longest answer 10 + EOS -> 3 blocks of 4
    assert b.tokens.shape[1] == P + A + A
    clean = b.tokens[:, : P + A]
    assert (clean != ids.mask).all()
    noisy = b.tokens[:, P + A:]
    assert ((noisy == ids.mask) == (b.weight[:, P + A:] > 0)).all()
    assert (b.weight[:, : P + A] == 0).all()
    # every noisy block state masks at least one position
    assert (noisy.view(2, 3, 4) == ids.mask).any(-1).all()
    # targets at noisy positions are the clean answer tokens
    assert torch.equal(b.targets[:, P + A:], clean[:, P:])


def test_grid_rows_mask_a_free_position_in_every_state():
    """On the grid a prompt's tail opens the first canvas and is never masked; the one position every
    noisy state must mask is drawn among the others (drawn over the whole block, a tail of 3 in a block of
    4 left about a third of those states with nothing to learn)."""
    from orl.train.batches import grid_pairs

    ids = special_ids(TOK, 128)
    pairs = [([5] * (8 + k), [7, 8, 9]) for k in range(4)] * 64  # tails of 0-3 in blocks of 4
    rows, fixed = grid_pairs(pairs, 4)
    b = diffusion_batch(rows, 4, ids, torch.Generator().manual_seed(0), grid=True, fixed=fixed)
    noisy = b.tokens[:, -8:].view(len(rows), 2, 4) == ids.mask  # two noisy blocks after 8 + 8 clean tokens
    assert bool(noisy.any(-1).all())
    for row, k in zip(noisy, fixed):
        assert not bool(row[0, :k].any())  # the tail itself: never masked


def test_shifted_diffusion_row_equals_the_engine_step():
    """Training rows and the engine agree on where a shifted model reads each token: the all-masked
    state of answer block 1 in a staircase row (block 0 clean before it) gives the logits of the
    engine's first step on that block after block 0 was committed."""
    import dataclasses

    from orl.engine import DecodeConfig, Engine
    from orl.engine.decode import block_forward
    from orl.model import Transformer

    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(small_cfg().model, shift_logits=True)).eval()
    ids = special_ids(TOK, 128)
    prompt, answer = TOK.encode("sort:3,1,2="), TOK.encode("1,2,3xyz")  # 8 + EOS: blocks of 4 -> 3 blocks
    b = diffusion_batch([(prompt, answer)], 4, ids, torch.Generator().manual_seed(0))
    P, A = len(prompt), 12
    b.tokens[0, P + A + 4: P + A + 8] = ids.mask  # noisy state of block 1: all masked
    with torch.no_grad():
        row = model(b.tokens, b.pos, b.mask, read_from=b.read_from)[0, P + A + 4: P + A + 8]
    eng = Engine(model, TOK)
    cfg = DecodeConfig(block_len=4, max_new_tokens=12, rule="topk", steps_per_block=0)
    st, P0 = eng.setup([prompt], cfg)
    eng.begin_block(st, cfg, P0, 0, [True])  # commit block 0 by hand (the row's clean answer) ...
    st.canvas.copy_(torch.tensor([answer[:4]]))
    st.unresolved.zero_()
    eng.runner.commit(st, cfg)  # ... its commit forward writes block 0's clean K/V and the carry
    eng.begin_block(st, cfg, P0, 1, [True])  # then block 1, all masked
    with torch.no_grad():
        step = block_forward(model, st, cfg, eng.ids)[0]
    keep = ~st.banned
    torch.testing.assert_close(step[:, keep], row[:, keep], atol=1e-4, rtol=1e-4)
    # without the read_from of the row the first token would be read off the noisy block itself
    with torch.no_grad():
        unshifted = model(b.tokens, b.pos, b.mask)[0, P + A + 4: P + A + 8]
    assert not torch.allclose(unshifted[0], row[0], atol=1e-3)


def test_few_steps_reduce_loss(tmp_path):
    cfg = small_cfg(ar_steps=25, diffusion_steps=0, lr=1e-2)
    pretrain(cfg, tmp_path / "run", log=lambda *_: None)
    ls = losses(tmp_path / "run" / "train.log.jsonl")
    assert sum(ls[-5:]) / 5 < 0.7 * sum(ls[:5]) / 5


def test_init_starts_from_a_checkpoint_with_a_fresh_schedule(tmp_path):
    from dataclasses import replace
    from orl.checkpoint import load_checkpoint
    pretrain(small_cfg(), tmp_path / "a", log=lambda *_: None)
    base, _, _ = load_checkpoint(tmp_path / "a")
    cfg = small_cfg(ar_steps=1, diffusion_steps=0, init=str(tmp_path / "a"), lr=1e-9, warmup=0)
    b = pretrain(cfg, tmp_path / "b", log=lambda *_: None)
    assert [json.loads(line)["step"] for line in open(tmp_path / "b" / "train.log.jsonl")] == [1]  # a new run
    for (name, x), y in zip(base.state_dict().items(), b.state_dict().values()):
        assert torch.allclose(x, y, atol=1e-6), name  # one step at lr 1e-9: the checkpoint's weights
    fresh = pretrain(replace(cfg, init=""), tmp_path / "c", log=lambda *_: None)
    assert not torch.allclose(base.lm_head.weight, fresh.lm_head.weight, atol=1e-3)  # the test can fail
    with pytest.raises(ValueError, match="differs from the run's.*dim"):
        pretrain(replace(cfg, model=replace(cfg.model, dim=cfg.model.dim * 2)), tmp_path / "d", log=lambda *_: None)
    with pytest.raises(FileNotFoundError, match="init=.*no such checkpoint"):
        pretrain(replace(cfg, init=str(tmp_path / "nowhere")), tmp_path / "e", log=lambda *_: None)


def crash_in_step(monkeypatch, n: int) -> None:
    """pretrain's n-th train_step raises KeyboardInterrupt (a cut run); monkeypatch.undo() restores it."""
    import orl.train.pretrain as mod
    real, calls = mod.train_step, []

    def crashing(*args, **kw):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(mod, "train_step", crashing)


def test_a_run_from_init_resumes_its_own_state(tmp_path, monkeypatch):
    import orl.train.pretrain as mod
    pretrain(small_cfg(ar_steps=4, diffusion_steps=0), tmp_path / "a", log=lambda *_: None)
    cfg = small_cfg(ar_steps=6, diffusion_steps=0, init=str(tmp_path / "a"), save_every=2)
    pretrain(cfg, tmp_path / "whole", log=lambda *_: None)
    crash_in_step(monkeypatch, 4)  # after the checkpoint at 2
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, tmp_path / "cut", log=lambda *_: None)
    monkeypatch.undo()
    monkeypatch.setattr(mod, "load_initial", lambda *a: pytest.fail("a resumed run read init"))
    pretrain(cfg, tmp_path / "cut", log=lambda *_: None)
    assert losses(tmp_path / "cut" / "train.log.jsonl") == losses(tmp_path / "whole" / "train.log.jsonl")


def test_resume_is_exact(tmp_path, monkeypatch):
    pretrain(small_cfg(), tmp_path / "a", log=lambda *_: None)

    crash_in_step(monkeypatch, 8)  # after the checkpoint at 6, in the diffusion stage
    try:
        pretrain(small_cfg(), tmp_path / "b", log=lambda *_: None)
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    pretrain(small_cfg(), tmp_path / "b", log=lambda *_: None)

    def by_step(path):
        return {r["step"]: r["loss"] for r in map(json.loads, open(path))}

    a, b = by_step(tmp_path / "a" / "train.log.jsonl"), by_step(tmp_path / "b" / "train.log.jsonl")
    assert len(a) == 12 and a == b
    # step 7 ran before the crash and again after the resume from step 6: the log holds it once
    assert [json.loads(line)["step"] for line in open(tmp_path / "b" / "train.log.jsonl")] == list(range(1, 13))
    assert (tmp_path / "a" / "stage1" / "trainer_state.pt").exists()  # the end of stage 1 is kept


def test_micro_batches_follow_the_mix():
    from orl.train.pretrain import make_batches

    cfg = small_cfg(tasks=("add", "long", "sort"), mix=(5, 0, 2))
    ar = make_batches(cfg, TOK, 0)
    assert [b.tokens.shape[0] for b in ar] == [5, 2]
    # an add row is ~11 tokens: padding to the family's own longest row, not to a `long` row
    assert ar[0].tokens.shape[1] <= 12
    diff = make_batches(cfg, TOK, cfg.ar_steps)
    assert [b.tokens.shape[0] for b in diff] == [5, 2] and diff[0].tokens.shape[1] == 8 + 8 + 8
    # batch_size spread evenly when no mix is given
    assert small_cfg(tasks=("add", "sort", "prog"), batch_size=8).samples_per_task == (3, 3, 2)


def test_mix_is_validated():
    import pytest

    for bad in [(1, 2), (1, -1, 1, 1, 1), (0, 0, 0, 0, 0)]:
        with pytest.raises(ValueError, match="mix"):
            small_cfg(mix=bad)


def test_micro_batch_loss_is_the_mean_over_all_positions():
    """Splitting a batch into per-family micro-batches must not change the loss being optimised."""
    from orl.model.model import Transformer
    from orl.train.batches import weighted_ce
    from orl.train.pretrain import make_batches, make_optimizer, train_step

    cfg = small_cfg(tasks=("add", "prog"), mix=(3, 3))
    torch.manual_seed(0)
    model = Transformer(cfg.model)
    batches = make_batches(cfg, TOK, 0)
    with torch.no_grad():
        ce = [weighted_ce(model(b.tokens, b.pos, b.mask), b) for b in batches]
    w = [b.weight.sum() for b in batches]
    expected = float(sum(c * x for c, x in zip(ce, w)) / sum(w))
    got = train_step(model, make_optimizer(model, cfg), batches, cfg, lr=0.0)
    assert abs(got - expected) < 1e-5


def test_stage2_lr_and_ar_peer_schedule():
    from orl.train.pretrain import lr_at, make_batches, stage_of

    cfg = small_cfg(ar_steps=10, diffusion_steps=10, warmup=2, lr=1e-2, stage2_lr=1e-3)
    assert lr_at(cfg, 1) == 1e-2 and lr_at(cfg, 11) == 1e-3  # both stages peak after their warm-up
    peer = small_cfg(ar_steps=10, diffusion_steps=10, warmup=2, lr=1e-2, stage2_lr=1e-3, convert=False)
    assert [stage_of(peer, s) for s in (9, 10)] == ["ar", "ar2"] and lr_at(peer, 11) == lr_at(cfg, 11)
    # the peer sees the same samples as the dLLM in stage 2, as causal rows
    d, a = make_batches(cfg, TOK, 12), make_batches(peer, TOK, 12)
    assert [b.tokens.shape[0] for b in d] == [b.tokens.shape[0] for b in a]
    assert all(b.mask.shape[-1] == b.tokens.shape[1] for b in a) and all((b.tokens != TOK.mask_id).all() for b in a)


def test_ar_peer_preset_matches_the_base_recipe():
    from dataclasses import asdict

    from orl.presets import get_preset

    base, peer = asdict(get_preset("pretrain", "tiny_base")), asdict(get_preset("pretrain", "tiny_ar"))
    diff = {k for k in base if base[k] != peer[k]}
    assert diff == {"model", "convert"}
    # the shifted read-out only changes how a block-diffusion model reads logits, not the weights or
    # the AR stages: the peer drops it (and the position table) to be a plain Qwen3
    assert {k for k in base["model"] if base["model"][k] != peer["model"][k]} == {"learned_pos", "shift_logits"}


def test_v5_base_preset_changes_only_the_tasks_and_mix():
    from dataclasses import asdict

    from orl.eval.tasks import SUITE, SUITE_V5, get_task
    from orl.presets import get_preset

    base, v5 = asdict(get_preset("pretrain", "tiny_base")), asdict(get_preset("pretrain", "tiny_base5"))
    assert tuple(base["tasks"]) == SUITE and len(base["mix"]) == len(SUITE)
    assert {k for k in base if base[k] != v5[k]} == {"tasks", "mix"}
    assert tuple(v5["tasks"]) == SUITE_V5 and len(v5["mix"]) == len(SUITE_V5) and sum(v5["mix"]) == sum(base["mix"])
    assert all(get_task(t) for t in SUITE_V5)


def test_ar_aux_adds_weighted_causal_rows_in_stage2():
    from orl.train.pretrain import make_batches

    cfg = small_cfg(tasks=("add", "sort"), mix=(3, 2), ar_aux=0.5)
    assert len(make_batches(cfg, TOK, 0)) == 2                # stage 1: AR rows only
    d = make_batches(cfg, TOK, cfg.ar_steps)
    assert len(d) == 4
    plain = make_batches(small_cfg(tasks=("add", "sort"), mix=(3, 2)), TOK, cfg.ar_steps)
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(d[:2], plain))  # same diffusion rows
    ar = make_batches(small_cfg(tasks=("add", "sort"), mix=(3, 2), ar_steps=100), TOK, cfg.ar_steps)
    assert torch.equal(d[2].tokens, ar[0].tokens) and torch.equal(d[2].weight, 0.5 * ar[0].weight)


def test_eval_that_cannot_fit_is_refused_before_the_run(tmp_path):
    """The engine refuses an eval request longer than the context only when the eval runs (step 500 of a
    real run once): pretrain checks every family's eval prompts first and writes nothing."""
    import pytest

    from orl.eval.tasks import get_task
    from orl.train.heldout import check_eval_fits

    P = max(len(TOK.encode(get_task("prog7xph").sample("heldout", i).prompt)) for i in range(2))
    # AR eval: prompt + max_new_tokens; at the boundary it fits, one past it does not
    check_eval_fits(("prog7xph",), TOK, 2, 100 - P, 100, ar=True)
    with pytest.raises(ValueError, match=rf"prog7xph: prompt \({P} tokens\) \+ max_new_tokens \({101 - P}\) exceeds the context of 100"):
        check_eval_fits(("prog7xph",), TOK, 2, 101 - P, 100, ar=True)
    # block-diffusion eval: whole blocks, so 1 new token of blocks of 16 takes 16 slots
    with pytest.raises(ValueError, match=rf"1 blocks of 16 exceeds the context of {P + 15}"):
        check_eval_fits(("prog7xph",), TOK, 2, 1, P + 15, ar=True, block_len=16)
    check_eval_fits(("prog7xph",), TOK, 2, 1, P + 16, ar=False, block_len=16)
    # the absolute grid: the prompt's partial last block opens the first canvas, so the cache holds the
    # whole-block prefill and then the canvases (engine.setup sizes it so, and checks that); counting the
    # whole prompt next to the canvases refused requests that fit (a 65-token prompt with a 63-token one)
    from orl.engine import DecodeConfig, Engine
    from orl.engine.layouts import plan
    from orl.model import Transformer

    ids = [TOK.encode(get_task("prog7xph").sample("heldout", i).prompt) for i in range(2)]
    grid = plan(ids, "absolute_grid", 16, 1)
    need = grid.P + grid.n_blocks * 16
    assert need < P + 16 and grid.P < P  # the tail lies inside the first canvas
    check_eval_fits(("prog7xph",), TOK, 2, 1, need, ar=False, block_len=16, layout="absolute_grid")
    with pytest.raises(ValueError, match=rf"the first {P - grid.P} inside the first canvas\) \+ 1 blocks of 16 exceeds"):
        check_eval_fits(("prog7xph",), TOK, 2, 1, need - 1, ar=False, block_len=16, layout="absolute_grid")
    model = Transformer(small_cfg().model).eval()
    out = Engine(model, TOK, max_len=need).generate(
        [get_task("prog7xph").sample("heldout", i).prompt for i in range(2)],
        DecodeConfig(block_len=16, max_new_tokens=1, layout="absolute_grid"))
    assert [len(g.token_ids) for g in out] == [1, 1]  # the engine decodes what the check passes
    with pytest.raises(ValueError, match="nothing to check"):
        check_eval_fits(("prog7xph",), TOK, 2, 1, 1000, ar=False)

    cfg = small_cfg(tasks=("prog7xph",), mix=(1,), eval_max_new_tokens=161 - P)
    with pytest.raises(ValueError, match=rf"lower eval_max_new_tokens \({161 - P}\) or raise model.max_seq_len"):
        pretrain(cfg, tmp_path / "run", log=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_eval_budget_may_change_on_resume():
    from orl.train.loop import config_diff

    a, b = small_cfg().to_dict(), small_cfg(eval_max_new_tokens=32).to_dict()
    assert config_diff(a, b) == []
    assert config_diff(a, small_cfg(lr=1e-3).to_dict()) != []


def test_grid_layout_trains_the_rows_the_engine_decodes(tmp_path):
    """layout absolute_grid: stage 2's noisy blocks lie on the grid from position 0, the prompt's partial
    last block opens the first one (in it, never masked), the next-token rows stay as they were, and the
    checkpoint tells the engine to decode on the grid."""
    import pytest

    from orl.engine.config import DecodeConfig
    from orl.train.pretrain import make_batches

    L, mask_id = 8, special_ids(TOK, 128).mask
    cfg = small_cfg(tasks=("long7xp",), mix=(4,), ar_aux=0.5, layout="absolute_grid")
    grid, aux = make_batches(cfg, TOK, cfg.ar_steps)
    assert aux.read_from is None  # the next-token rows stay causal: the grid changes only the diffusion rows
    eq = TOK.encode("=")[0]
    tails = 0
    for b in range(grid.tokens.shape[0]):
        tok, pos = grid.tokens[b], grid.pos[b]
        first = int((tok == eq).nonzero()[0])
        prompt_len = int(pos[first]) + 2           # the prompt ends with the marker after '='
        noisy = pos[first + 1:].diff() < 0          # the noisy copies start where the positions go back
        start = first + 1 + int(noisy.nonzero()[0]) + 1
        npos, ntok = pos[start:], tok[start:]
        assert int(npos[0]) % L == 0                # the first noisy block starts on the grid
        assert not bool(((ntok == mask_id) & (npos < prompt_len)).any())  # the tail is never masked
        tails += int((npos < prompt_len).sum())
    assert tails > 0                                # and it is there, opening the first canvas
    assert bool((grid.weight[grid.tokens == mask_id] > 0).all())
    with pytest.raises(ValueError, match="unknown layout 'grid'"):
        small_cfg(layout="grid")
    run = tmp_path / "grid"
    pretrain(small_cfg(tasks=("long7xp",), mix=(4,), layout="absolute_grid", ar_steps=2, diffusion_steps=2,
                       eval_every=2, eval_max_new_tokens=16), run, log=lambda *a: None)
    manifest = json.loads((run / "orl.json").read_text())
    assert manifest["layout"] == "absolute_grid" and manifest["objective"] == "block_diffusion"
    assert DecodeConfig.from_manifest(manifest).layout == "absolute_grid"
    assert "layout" not in json.loads((run / "stage1" / "orl.json").read_text())  # stage 1 is an AR model
    assert "long7xp" in [json.loads(line) for line in open(run / "train.log.jsonl")][-1]["eval"]
    with pytest.raises(ValueError, match="cannot change it to 'prompt_block' midway"):
        pretrain(small_cfg(tasks=("long7xp",), mix=(4,), ar_steps=2, diffusion_steps=4, eval_every=2,
                           eval_max_new_tokens=16), run, allow_config_change=True, log=lambda *a: None)
