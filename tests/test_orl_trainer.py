"""ORL trainer end to end on a tiny random base: updates happen, resume is exact, presets are sane."""
import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

import orl.train.orl as trainer
from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.engine import DecodeConfig
from orl.model import ModelArgs, Transformer
from orl.presets import get_preset
from orl.tokenizer import CharTokenizer
from orl.train.rollout import Rollout, select_kept
from orl.train.orl import ORLConfig, train_orl


@pytest.fixture()
def base(tmp_path):
    """Shifted read-out, like the shipped base (the replay tests cover both read-outs)."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    return save_checkpoint(model, CharTokenizer(), tmp_path / "base", {"block_len": 8})


def cfg_for(base, **kw) -> ORLConfig:
    return dataclasses.replace(get_preset("orl", "smoke"), base=str(base), updates=4, save_every=2, eval_every=100,
                               threads=1, adapter_dim=16, lr=1e-3,
                               rollout=DecodeConfig(block_len=8, max_new_tokens=16, threshold=0.3,
                                                    temperature=0.8, residual="adapter"), **kw)


@pytest.fixture()
def accept_everything(monkeypatch):
    """A random base is never right; accept every finished-or-not rollout (ORL's and RCD's) so updates happen."""
    import orl.train.rcd as rcd

    real = trainer.collect

    def collect(*args, **kw):
        rs = real(*args, **kw)
        for r in rs:
            r.verified = True
        return rs

    monkeypatch.setattr(trainer, "collect", collect)
    monkeypatch.setattr(rcd, "collect", collect)


def records(path):
    return {r["update"]: r for r in map(json.loads, open(path))}


def test_updates_change_weights_and_log(base, tmp_path, accept_everything):
    train_orl(cfg_for(base), tmp_path / "run", log=lambda *_: None)
    recs = records(tmp_path / "run" / "train.log.jsonl")
    assert sorted(recs) == [1, 2, 3, 4]
    assert all("loss" in r and "aec" in r and r["kept"] > 0 for r in recs.values())
    assert recs[4]["generated_tokens"] > recs[1]["generated_tokens"] > 0
    trained, _, manifest = load_checkpoint(tmp_path / "run")
    assert manifest["residual_mode"] == "adapter" and manifest["recipe"]["name"] == "orl"
    assert trained.model.residual_adapter.down_proj.weight.abs().sum() > 0  # the adapter learned something


def test_rolls_out_on_the_tasks_the_base_was_trained_on(tmp_path, accept_everything, monkeypatch):
    from orl.eval.tasks import SUITE
    from orl.train.rollout import trained_tasks

    assert trained_tasks({}) == SUITE and trained_tasks({"recipe": None}) == SUITE
    assert trained_tasks({"recipe": {"config": {"tasks": ["split", "long"]}}}) == ("split", "long")
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    base = save_checkpoint(model, CharTokenizer(), tmp_path / "base", {
        "block_len": 8, "recipe": {"name": "pretrain", "config": {"tasks": ["split", "keysort"]}}})
    seen = []
    real = trainer.sample_prompts
    monkeypatch.setattr(trainer, "sample_prompts", lambda tasks, *a: seen.append(tasks) or real(tasks, *a))
    train_orl(dataclasses.replace(cfg_for(base), updates=2), tmp_path / "run", log=lambda *_: None)
    assert set(seen) == {("split", "keysort")}
    assert load_checkpoint(tmp_path / "run")[2]["recipe"]["config"]["tasks"] == ["split", "keysort"]
    seen.clear()  # an explicit list wins
    train_orl(dataclasses.replace(cfg_for(base, tasks=("long",)), updates=1), tmp_path / "run2", log=lambda *_: None)
    assert set(seen) == {("long",)}


@pytest.mark.parametrize("reuse", [1, 4])
def test_resume_is_exact(base, tmp_path, accept_everything, monkeypatch, reuse):
    """reuse 4 (the stale-rollout ablation): save_every 2 falls inside the first batch, whose rollouts and rollout
    weights are not saved; the save waits for the batch's end, so the resumed run does not roll out afresh there
    (it did: other data, twice the generated tokens)."""
    cfg = cfg_for(base, rollout_reuse=reuse)
    train_orl(cfg, tmp_path / "a", log=lambda *_: None)
    real, calls = trainer.orl_loss, []

    def crashing(*args, **kw):  # dies in update 3, after the checkpoint at update 2
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(trainer, "orl_loss", crashing)
    with pytest.raises(KeyboardInterrupt):
        train_orl(cfg, tmp_path / "b", log=lambda *_: None)
    monkeypatch.setattr(trainer, "orl_loss", real)
    train_orl(cfg, tmp_path / "b", log=lambda *_: None)
    a, b = records(tmp_path / "a" / "train.log.jsonl"), records(tmp_path / "b" / "train.log.jsonl")
    assert sorted(b) == [1, 2, 3, 4]
    for u in (1, 2, 3, 4):
        assert a[u]["loss"] == b[u]["loss"] and a[u]["rollout_tpf"] == b[u]["rollout_tpf"]
        assert a[u]["generated_tokens"] == b[u]["generated_tokens"]
    if reuse == 4:
        assert a[4]["generated_tokens"] == a[1]["generated_tokens"]  # one rollout batch for all four updates


def test_stale_rollouts_reuse_one_batch(base, tmp_path, accept_everything):
    train_orl(cfg_for(base, rollout_reuse=2), tmp_path / "s", log=lambda *_: None)
    recs = records(tmp_path / "s" / "train.log.jsonl")
    assert recs[1]["generated_tokens"] == recs[2]["generated_tokens"] < recs[3]["generated_tokens"]


def test_fastest_keeps_one_rollout_per_prompt(base, tmp_path, accept_everything):
    cfg = cfg_for(base, keep="fastest")
    train_orl(cfg, tmp_path / "f", log=lambda *_: None)
    assert all(r["kept"] == cfg.prompts_per_update for r in records(tmp_path / "f" / "train.log.jsonl").values())


def test_select_kept_picks_the_fastest_verified_rollout_of_each_prompt():
    def r(forwards, ok):
        return Rollout(sample=None, gen=SimpleNamespace(forwards=forwards), verified=ok)

    rs = [r(5, True), r(3, True), r(2, False), r(3, True),   # prompt 1: the 3-forward one (first of the tie)
          r(4, False), r(1, False), r(2, False), r(9, False),  # prompt 2: nothing verified
          r(7, True), r(8, False), r(9, False), r(6, False)]   # prompt 3: the only verified one
    assert select_kept(rs, 4, "fastest") == [rs[1], rs[8]]
    assert select_kept(rs, 4, "verified") == [rs[0], rs[1], rs[3], rs[8]]
    with pytest.raises(ValueError, match="groups of 5"):
        select_kept(rs, 5, "fastest")
    with pytest.raises(ValueError, match="keep must be"):
        select_kept(rs, 4, "best")


def test_ablation_presets_differ_only_where_intended():
    main = get_preset("orl", "tiny_orl")
    assert get_preset("orl", "no_aec").weights.lambda_aec == 0 and main.weights.lambda_aec > 0
    assert get_preset("orl", "no_residual").rollout.residual == "off"
    assert get_preset("orl", "stale").rollout_reuse > 1
    assert get_preset("orl", "fastest").keep == "fastest" and main.keep == "verified"
    for name in ("no_aec", "no_residual", "stale", "fastest"):
        p = get_preset("orl", name)
        assert (p.updates, p.prompts_per_update, p.group_size) == (main.updates, main.prompts_per_update,
                                                                   main.group_size)
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("orl", "nope")


def test_rcd_trains_on_base_outputs_and_resumes_exactly(base, tmp_path, accept_everything):
    """The off-policy baseline: data from the frozen base, an update per batch, exact resume."""
    import orl.train.rcd as rcd

    cfg = dataclasses.replace(cfg_for(base), rollout=dataclasses.replace(cfg_for(base).rollout, residual="rcd"))
    rcd.train_rcd(cfg, tmp_path / "full", log=lambda *_: None)
    rcd.train_rcd(dataclasses.replace(cfg, updates=2), tmp_path / "part", log=lambda *_: None)
    rcd.train_rcd(cfg, tmp_path / "part", log=lambda *_: None)
    full, part = records(tmp_path / "full" / "train.log.jsonl"), records(tmp_path / "part" / "train.log.jsonl")
    assert sorted(full) == [1, 2, 3, 4] and all(r["kept"] > 0 for r in full.values())
    assert [full[u]["loss"] for u in (3, 4)] == [part[u]["loss"] for u in (3, 4)]
    model, _, manifest = load_checkpoint(tmp_path / "full")
    assert manifest["residual_mode"] == "rcd" and manifest["recipe"]["name"] == "rcd"
    base_model = load_checkpoint(base)[0]
    assert any((a != b).any() for a, b in zip(model.parameters(), base_model.parameters()))


def test_an_eval_that_cannot_fit_is_refused_before_any_update(base, tmp_path, accept_everything):
    """160 context slots: 160 new tokens in blocks of 8 cannot follow any prompt; the run stops before its
    first rollout, names the setting, and the same directory then runs with a budget that fits."""
    fits = cfg_for(base)
    too_long = dataclasses.replace(fits, rollout=dataclasses.replace(fits.rollout, max_new_tokens=160))
    with pytest.raises(ValueError, match=r"lower rollout.max_new_tokens \(160\) or raise engine_max_len .*blocks of 8 exceeds the context of 160"):
        train_orl(too_long, tmp_path / "run", log=lambda *_: None)
    assert not (tmp_path / "run" / "train.log.jsonl").exists() or not open(tmp_path / "run" / "train.log.jsonl").read()
    train_orl(dataclasses.replace(fits, updates=2), tmp_path / "run", log=lambda *_: None)
    assert sorted(records(tmp_path / "run" / "train.log.jsonl")) == [1, 2]


def test_reference_relabelling_trains_on_unverified_rollouts(base, tmp_path):
    """A random base is never right: plain ORL keeps nothing and leaves the weights as they are, while
    relabel="reference" trains on the states before each rollout's first wrong commit."""
    train_orl(dataclasses.replace(cfg_for(base), updates=2), tmp_path / "plain", log=lambda *_: None)
    assert all("loss" not in r for r in records(tmp_path / "plain" / "train.log.jsonl").values())
    train_orl(dataclasses.replace(cfg_for(base, relabel="reference"), updates=2), tmp_path / "ref", log=lambda *_: None)
    recs = records(tmp_path / "ref" / "train.log.jsonl")
    assert all(r["rollout_verified"] == 0 and r["kept"] == r["relabelled"] > 0 for r in recs.values())
    assert all(r["relabelled_states"] >= r["relabelled"] and r["pred"] > 0 for r in recs.values())
    before, after = load_checkpoint(base)[0], load_checkpoint(tmp_path / "ref")[0]
    assert not torch.equal(before.lm_head.weight, after.lm_head.weight)
    with pytest.raises(ValueError, match="relabel must be one of"):
        cfg_for(base, relabel="gold")
    # the next-token anchor reads verified answers only, never the relabelled states of wrong ones
    from orl.train.objective import LossWeights
    train_orl(dataclasses.replace(cfg_for(base, relabel="reference", weights=LossWeights(lambda_ar=1.0)), updates=1),
              tmp_path / "ar", log=lambda *_: None)
    (r,) = records(tmp_path / "ar" / "train.log.jsonl").values()
    assert r["kept"] == r["relabelled"] > 0 and r["ar"] == 0


def test_resume_refuses_a_base_that_holds_other_weights(base, tmp_path, accept_everything):
    """Before: the run recorded --base as spelled, so the same relative path from another directory (other weights)
    resumed silently, and the KL anchor's reference (reloaded from --base) changed under the run."""
    from orl.train.loop import ResumeError

    train_orl(cfg_for(base), tmp_path / "run", log=lambda *_: None)
    torch.manual_seed(1)
    other = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    save_checkpoint(other, CharTokenizer(), base, {"block_len": 8})  # the same path, other weights
    with pytest.raises(ResumeError, match="now holds other weights than the run started from"):
        train_orl(cfg_for(base), tmp_path / "run", log=lambda *_: None)


@pytest.mark.parametrize("reuse", [1, 2])
def test_rollout_prompts_replay_from_the_manifest(base, tmp_path, monkeypatch, reuse):
    """benchmarks/training_draws.rollout_samples (what benchmarks/heldout_leak.py --orl counts as trained on) gives,
    from the run's manifest alone, exactly the prompts the trainer drew; with stale rollouts only every reuse-th
    update draws."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "training_draws", Path(__file__).resolve().parents[1] / "benchmarks" / "training_draws.py")
    draws = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draws)
    drawn = []
    real = trainer.sample_prompts

    def spy(tasks, n, key):
        got = real(tasks, n, key)
        drawn.extend(got)
        return got

    monkeypatch.setattr(trainer, "sample_prompts", spy)
    cfg = cfg_for(base, tasks=("long7xp", "prog7xp", "split7xp"), seed=3, prompts_per_update=4, rollout_reuse=reuse)
    train_orl(cfg, tmp_path / "run", log=lambda *_: None)
    assert len(drawn) == 4 * 4 // reuse
    assert list(draws.rollout_samples(tmp_path / "run" / "orl.json")) == drawn
    with pytest.raises(ValueError, match="not an ORL manifest"):
        list(draws.rollout_samples(base / "orl.json"))
