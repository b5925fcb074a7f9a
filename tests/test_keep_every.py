"""PretrainConfig.keep_every: copies of the checkpoint every N steps as OUT-atSTEP beside OUT, each a checkpoint
of its own, written again by a resumed run, and never over another run's directory."""
import json
import shutil

import pytest
from safetensors.torch import load_file

from orl.checkpoint import load_checkpoint
from orl.train.loop import ResumeError, load_train_state, snapshot_dirs
from orl.train.pretrain import PretrainConfig, pretrain
from test_orl_trainer import accept_everything  # noqa: F401 (a fixture)
from test_pretrain import small_cfg


def quiet(*_):
    pass


def test_snapshot_dirs_sit_beside_out_and_leave_the_last_step_to_out(tmp_path):
    dirs = snapshot_dirs(tmp_path / "run", 4, 12)
    assert dirs == {4: tmp_path / "run-at4", 8: tmp_path / "run-at8"}
    assert snapshot_dirs(tmp_path / "run", 4, 13) == {4: tmp_path / "run-at4", 8: tmp_path / "run-at8",
                                                      12: tmp_path / "run-at12"}
    assert snapshot_dirs(tmp_path / "run", 0, 12) == {}
    with pytest.raises(ValueError, match="keep_every must be >= 0"):
        PretrainConfig(keep_every=-1)


def test_copies_are_checkpoints_of_their_step_and_a_resumed_run_writes_them_again(tmp_path, monkeypatch):
    pretrain(small_cfg(keep_every=4), tmp_path / "a", log=quiet)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a-at4", "a-at8"]
    for step in (4, 8):
        d = tmp_path / f"a-at{step}"
        manifest = json.loads((d / "orl.json").read_text())
        assert manifest["recipe"]["step"] == step and load_train_state(d)["step"] == step
        load_checkpoint(d)  # what orl eval / orl serve read
    # step 8 is a diffusion-stage checkpoint (6 AR steps): it says so, and step 4 says autoregressive
    assert json.loads((tmp_path / "a-at4" / "orl.json").read_text())["objective"] == "autoregressive"
    assert json.loads((tmp_path / "a-at8" / "orl.json").read_text())["objective"] == "block_diffusion"

    import orl.train.pretrain as mod
    real, calls = mod.train_step, []

    def crashing(*args, **kw):  # dies in step 5: after the copy of step 4, with `out` saved at step 3
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(mod, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        pretrain(small_cfg(keep_every=4), tmp_path / "b", log=quiet)
    monkeypatch.setattr(mod, "train_step", real)
    assert load_train_state(tmp_path / "b")["step"] == 3 and (tmp_path / "b-at4").exists()
    pretrain(small_cfg(keep_every=4), tmp_path / "b", log=quiet)  # resumes at 3 and writes b-at4 again
    for name in ("", "-at4", "-at8"):
        a, b = load_file(tmp_path / f"a{name}" / "model.safetensors"), load_file(tmp_path / f"b{name}" / "model.safetensors")
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), name


def test_another_runs_checkpoint_or_a_foreign_directory_is_not_written_over(tmp_path):
    pretrain(small_cfg(keep_every=4, lr=1e-3), tmp_path / "other", log=quiet)
    shutil.copytree(tmp_path / "other-at4", tmp_path / "run-at4")  # another run's checkpoint where ours would go
    before = (tmp_path / "run-at4" / "model.safetensors").read_bytes()
    with pytest.raises(ResumeError, match="run-at4.*checkpoint of another run"):
        pretrain(small_cfg(keep_every=4), tmp_path / "run", log=quiet)
    assert (tmp_path / "run-at4" / "model.safetensors").read_bytes() == before
    assert not (tmp_path / "run" / "model.safetensors").exists()  # refused before training

    shutil.rmtree(tmp_path / "run-at4")
    (tmp_path / "run-at8").mkdir()
    (tmp_path / "run-at8" / "notes.txt").write_text("mine")
    with pytest.raises(ResumeError, match="run-at8.*notes.txt"):
        pretrain(small_cfg(keep_every=4), tmp_path / "run", log=quiet)
    assert (tmp_path / "run-at8" / "notes.txt").read_text() == "mine"

    # keep_every may change on resume (the trajectory is the same, only the copies differ); a finished run
    # writes none
    shutil.rmtree(tmp_path / "run-at8")
    pretrain(small_cfg(), tmp_path / "c", log=quiet)
    pretrain(small_cfg(keep_every=4), tmp_path / "c", log=quiet)
    assert not list(tmp_path.glob("c-at*"))


def test_resume_checks_only_the_copies_it_will_write_and_accepts_its_own_after_a_config_change(tmp_path, monkeypatch):
    import orl.train.pretrain as mod
    real, calls = mod.train_step, []

    def crashing(*args, **kw):  # dies in step 11: `out` saved at step 6, copies at 2, 4, 6, 8 and 10 written
        calls.append(1)
        if len(calls) == 11:
            raise KeyboardInterrupt
        return real(*args, **kw)

    cfg = small_cfg(keep_every=2, save_every=6)
    monkeypatch.setattr(mod, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, tmp_path / "b", log=quiet)
    monkeypatch.setattr(mod, "train_step", real)
    assert load_train_state(tmp_path / "b")["step"] == 6
    assert sorted(p.name for p in tmp_path.glob("b-at*")) == ["b-at10", "b-at2", "b-at4", "b-at6", "b-at8"]
    # a note left in a copy the resumed run will not write again (step 4 <= 6) is no reason to refuse
    (tmp_path / "b-at4" / "notes.txt").write_text("mine")
    # the copies at 8 and 10 are this run's, of the config it resumes from: replaced after --allow-config-change
    changed = small_cfg(keep_every=2, save_every=6, lr=1e-3)
    with pytest.raises(ResumeError, match="another config"):
        pretrain(changed, tmp_path / "b", log=quiet)
    pretrain(changed, tmp_path / "b", log=quiet, allow_config_change=True)
    assert (tmp_path / "b-at4" / "notes.txt").read_text() == "mine"
    for step in (8, 10):
        saved = json.loads((tmp_path / f"b-at{step}" / "orl.json").read_text())["recipe"]
        assert saved["step"] == step and saved["config"]["lr"] == 1e-3


def test_a_symlink_where_a_copy_goes_is_refused(tmp_path):
    (tmp_path / "run-at4").symlink_to(tmp_path / "elsewhere")  # dangling: a write would go through it
    with pytest.raises(ResumeError, match="run-at4: it is a symlink"):
        pretrain(small_cfg(keep_every=4), tmp_path / "run", log=quiet)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "run" / "model.safetensors").exists()


def tiny_base(path):
    import torch

    from orl.checkpoint import save_checkpoint
    from orl.model import ModelArgs, Transformer
    from orl.tokenizer import CharTokenizer

    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    return save_checkpoint(model, CharTokenizer(), path, {"block_len": 8})


def rollout_run(recipe: str, base, **kw):
    """(config, train function) of a tiny ORL or RCD run (tests/test_orl_trainer.py's settings)."""
    import dataclasses

    import orl.train.rcd as rcd
    from orl.train.orl import train_orl
    from test_orl_trainer import cfg_for

    cfg = cfg_for(base, **kw)
    if recipe == "orl":
        return cfg, train_orl
    cfg = rcd.RCDConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(rcd.RCDConfig)})
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, residual="rcd")), rcd.train_rcd


def same_weights(a, b) -> bool:
    a, b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.parametrize("recipe", ["orl", "rcd"])
def test_orl_and_rcd_keep_copies_of_their_updates(tmp_path, recipe, accept_everything):
    """The rollout recipes keep OUT-atUPDATE too: the copy of update 2 holds the weights a 2-update run ends
    with (their learning rates are constant, so the first two updates are the same)."""
    import dataclasses

    cfg, train = rollout_run(recipe, tiny_base(tmp_path / "base"), keep_every=2)
    train(cfg, tmp_path / "run", log=quiet)
    train(dataclasses.replace(cfg, updates=2, keep_every=0), tmp_path / "two", log=quiet)
    assert sorted(p.name for p in tmp_path.glob("run*")) == ["run", "run-at2"]
    manifest = json.loads((tmp_path / "run-at2" / "orl.json").read_text())
    assert manifest["recipe"]["name"] == recipe and manifest["recipe"]["update"] == 2
    assert manifest["objective"] == "block_diffusion" and load_train_state(tmp_path / "run-at2")["update"] == 2
    assert same_weights(tmp_path / "run-at2", tmp_path / "two")
    assert not same_weights(tmp_path / "run-at2", tmp_path / "run")  # updates 3 and 4 moved the weights on
    # extended to 8 updates, the run resumes at 4, its old last update: that copy is made from `out` first
    train(dataclasses.replace(cfg, updates=8), tmp_path / "run", log=quiet)
    assert sorted(p.name for p in tmp_path.glob("run*")) == ["run", "run-at2", "run-at4", "run-at6"]
    train(dataclasses.replace(cfg, updates=4, keep_every=0), tmp_path / "four", log=quiet)
    assert same_weights(tmp_path / "run-at4", tmp_path / "four")
    assert json.loads((tmp_path / "run-at4" / "orl.json").read_text())["recipe"]["update"] == 4


def test_a_kill_between_the_copy_and_out_leaves_the_right_copy_after_resume(tmp_path, accept_everything, monkeypatch):
    """The copy is written first, so the resumed run writes it again; were `out` first, the resumed run would
    copy `out` there (its start step's copy is missing): either way the copy holds update 2."""
    import dataclasses

    import orl.train.orl as mod

    cfg, train = rollout_run("orl", tiny_base(tmp_path / "base"), keep_every=2)
    real, writes = mod.save_update, []

    def killed_after_the_first_write_of_update_2(*args, **kw):
        real(*args, **kw)
        writes.append(args[6])
        if writes.count(2) == 1 and args[6] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(mod, "save_update", killed_after_the_first_write_of_update_2)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", log=quiet)
    monkeypatch.setattr(mod, "save_update", real)
    train(cfg, tmp_path / "run", log=quiet)
    train(dataclasses.replace(cfg, updates=2, keep_every=0), tmp_path / "two", log=quiet)
    assert same_weights(tmp_path / "run-at2", tmp_path / "two")


def test_a_copy_that_would_be_the_base_is_refused_before_anything_is_written(tmp_path, accept_everything):
    from orl.atomic_dir import OutputIsInput

    base = tiny_base(tmp_path / "run-at2")  # where the run's copy of update 2 would go
    before = (base / "model.safetensors").read_bytes()
    cfg, train = rollout_run("rcd", base, keep_every=2)
    with pytest.raises(OutputIsInput, match="run-at2"):
        train(cfg, tmp_path / "run", log=quiet)
    assert (base / "model.safetensors").read_bytes() == before and not (tmp_path / "run" / "orl.json").exists()
