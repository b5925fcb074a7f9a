"""The draft recipe (orl.train.draft) on the shipped tiny base: rollouts through the fused self-speculative decoder
(its AR path's tokens, TPF over every forward), verified answers trained in the draft geometry, a checkpoint that
decodes as its base does and resumes exactly; bases it cannot train are refused by name."""
import json

import pytest
import torch

from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.cli import main
from orl.engine.ar import ARDecoder
from orl.engine.ar_step import ARConfig
from orl.engine.stops import with_stop
from orl.eval.tasks import get_task
from orl.presets import get_preset
from orl.train.draft import DraftConfig, roll_out, train_draft
from orl.train.orl import SHIPPED_BASE
from orl.train.rollout import sample_prompts

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rollouts_are_the_ar_paths_tokens_and_count_every_forward():
    model, tok, manifest = load_checkpoint(SHIPPED_BASE)
    dec = ARDecoder(model, tok, manifest=manifest)
    cfg = get_preset("draft", "smoke")
    samples = sample_prompts(("split", "prog"), 3, "t")
    rolls = roll_out(dec, samples, cfg, seed=0)
    for r in rolls:
        plain = dec.generate_ids([dec.encode(r.sample.prompt)], with_stop(ARConfig(max_new_tokens=cfg.max_new_tokens),
                                                                         tuple(get_task(r.sample.task).stop)))[0]
        assert r.gen.token_ids == plain.token_ids  # exactly the AR path's greedy tokens
        assert r.gen.forwards <= r.gen.n_tokens and 0.0 <= r.reward <= 1.0 and r.verified == (r.reward >= 1.0)
    assert sum(r.gen.n_tokens for r in rolls) > sum(r.gen.forwards for r in rolls)  # drafts accepted


def test_run_trains_saves_and_resumes_exactly(tmp_path):
    cfg = get_preset("draft", "smoke")
    whole = train_draft(cfg, tmp_path / "whole", log=lambda *_: None)
    log = [json.loads(x) for x in (tmp_path / "whole" / "train.log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2] and all(r["rollout_tpf"] >= 1.0 for r in log)
    assert any("loss" in r for r in log) and "eval" in log[-1]
    model, tok, manifest = load_checkpoint(tmp_path / "whole")
    base_manifest = load_checkpoint(SHIPPED_BASE)[2]
    assert manifest["recipe"]["name"] == "draft" and manifest["recipe"]["update"] == 2
    assert (manifest["block_len"], manifest["layout"]) == (base_manifest["block_len"], base_manifest.get("layout",
                                                                                                         "prompt_block"))
    changed = any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                       load_checkpoint(SHIPPED_BASE)[0].state_dict().values()))
    assert changed  # an update happened
    # one update, then the CLI resumes the second: the same weights as the run in one go
    train_draft(DraftConfig(**{**cfg.to_dict(), "updates": 1}), tmp_path / "cut", log=lambda *_: None)
    assert main(["train", "--recipe", "draft", "--preset", "smoke", "--out", str(tmp_path / "cut")]) == 0
    resumed = load_checkpoint(tmp_path / "cut")[0]
    for (n, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), n


def test_a_base_without_a_draft_path_is_refused(tmp_path):
    model, tok, manifest = load_checkpoint(SHIPPED_BASE)
    ar = tmp_path / "ar"
    save_checkpoint(model, tok, ar, {"objective": "autoregressive"})
    with pytest.raises(ValueError, match="block_diffusion|block-diffusion"):
        train_draft(DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "base": str(ar)}), tmp_path / "out",
                    log=lambda *_: None)
    with pytest.raises(ValueError, match="spec_tokens must be > 0"):
        DraftConfig(spec_tokens=0)


def test_micro_batches_give_the_one_batch_update():
    """An update split by row_tokens into micro-batches (gradients accumulated, each term normalised by its count
    over the whole update) moves the weights as the same update in one forward."""
    import copy

    from orl.model.vocab import special_ids
    from orl.train.draft import micro_batches, update_on

    model, tok, manifest = load_checkpoint(SHIPPED_BASE)
    dec = ARDecoder(model, tok, manifest=manifest)
    big = DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "max_new_tokens": 24, "engine_max_len": 64})
    rolls = roll_out(dec, sample_prompts(("split", "prog", "long"), 4, "mb"), big, seed=0)
    kept = [(dec.encode(r.sample.prompt), r.gen.token_ids) for r in rolls if r.gen.n_tokens >= 2]
    small = DraftConfig(**{**big.to_dict(), "row_tokens": 64 + 24 * 3})  # the least it may be: about a row each
    assert len(micro_batches(kept, small)) > 1 and len(micro_batches(kept, big)) == 1
    ids = special_ids(tok, model.args.vocab_size)
    after = []
    for cfg in (big, small):
        m = copy.deepcopy(model)
        from orl.train.loop import make_optimizer

        rec = update_on(m.train(), make_optimizer(m, cfg.lr), kept, cfg, ids)
        assert rec["draft_ce"] > 0 and rec["ar_ce"] > 0
        after.append(m.state_dict())
    for n, a in after[0].items():
        torch.testing.assert_close(a, after[1][n], atol=1e-6, rtol=1e-5, msg=n)


def test_a_run_that_keeps_nothing_stops_and_says_why(tmp_path, monkeypatch):
    import orl.train.draft as draft

    monkeypatch.setattr(draft, "reward_of", lambda *a: 0.0)
    monkeypatch.setattr(draft, "IDLE_LIMIT", 2)
    with pytest.raises(RuntimeError, match="2 updates in a row kept no verified answer"):
        train_draft(get_preset("draft", "smoke"), tmp_path / "out", log=lambda *_: None)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 3"):
        DraftConfig(max_new_tokens=2)
    with pytest.raises(ValueError, match="row_tokens .* must hold the longest row"):
        DraftConfig(row_tokens=100)


def test_kl_anchor_holds_the_ar_path_to_the_base(tmp_path):
    """kl_weight > 0 loads the base as a frozen reference: at the first update the model is the base, so the KL
    and its gradient are 0 (the same weights as without the term); later updates log a KL > 0, and a run with
    the anchor moves the AR path's answers less from the base's distribution than one without."""
    import copy

    from orl.model.vocab import special_ids
    from orl.train.draft import update_on
    from orl.train.loop import make_optimizer

    model, tok, manifest = load_checkpoint(SHIPPED_BASE)
    dec = ARDecoder(model, tok, manifest=manifest)
    cfg = DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "kl_weight": 1.0})
    rolls = roll_out(dec, sample_prompts(("split", "prog"), 3, "kl"), cfg, seed=0)
    kept = [(dec.encode(r.sample.prompt), r.gen.token_ids) for r in rolls if r.gen.n_tokens >= 2]
    ids = special_ids(tok, model.args.vocab_size)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    with_kl, without = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    rec = update_on(with_kl, make_optimizer(with_kl, cfg.lr), kept, cfg, ids, ref=ref)
    rec0 = update_on(without, make_optimizer(without, cfg.lr), kept, cfg, ids)
    assert rec["kl"] == 0.0 and "kl" not in rec0
    for (n, a), b in zip(with_kl.state_dict().items(), without.state_dict().values()):
        # a step moves a weight by lr = 1e-4 (Adam); the KL's float-noise gradient may move it by 1e-6
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0, msg=n)
    # then several updates at a high learning rate, with and without the anchor: the KL to the base grows less
    fast = DraftConfig(**{**cfg.to_dict(), "lr": 3e-3, "kl_weight": 20.0})
    kls = []
    for ref_arg in (ref, None):
        m = copy.deepcopy(model).train()
        opt = make_optimizer(m, fast.lr)
        for _ in range(4):
            update_on(m, opt, kept, fast, ids, ref=ref_arg)
        kls.append(update_on(copy.deepcopy(m), make_optimizer(m, 0.0), kept, fast, ids, ref=ref)["kl"])
    assert 0 < kls[0] < kls[1], kls
    run = train_draft(cfg, tmp_path / "kl", log=lambda *_: None)
    log = [json.loads(x) for x in (tmp_path / "kl" / "train.log.jsonl").read_text().splitlines()]
    assert all("kl" in r for r in log if "loss" in r) and run is not None
    with pytest.raises(ValueError, match="kl_weight must be >= 0"):
        DraftConfig(kl_weight=-1.0)


def test_the_stage2_preset_decodes_as_the_fused_evaluation_does():
    """tiny_draft7: the families it names exist, its drafts are lengths_eval.sh's fused k = 8, its KL anchor is on."""
    from pathlib import Path

    cfg = get_preset("draft", "tiny_draft7")
    assert all(get_task(t).name == t for t in cfg.tasks) and cfg.kl_weight > 0
    script = (Path(__file__).resolve().parents[1] / "benchmarks" / "lengths_eval.sh").read_text()
    assert f"--spec-tokens {cfg.spec_tokens} --spec-draft fused" in script
    assert f"--max-new-tokens {cfg.max_new_tokens} --batch-size 1" in script
