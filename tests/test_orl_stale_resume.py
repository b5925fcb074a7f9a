"""The stale-rollout ablation (rollout_reuse > 1) resumes exactly, like plain ORL (test_orl_trainer): neither a
rollout batch nor the weights that rolled it out (L_KL's reference) are saved, so a checkpoint inside a batch's
updates cannot continue that batch. A resumed run used to roll out afresh there: other data, twice the generated
tokens, other losses than the run it claims to continue."""
import dataclasses

import pytest

import orl.train.orl as trainer
from orl.train.loop import ResumeError
from orl.train.orl import train_orl
from tests.test_orl_trainer import accept_everything, base, cfg_for, records  # noqa: F401 (fixtures)


def test_an_interrupted_stale_run_resumes_exactly(base, tmp_path, accept_everything, monkeypatch):  # noqa: F811
    cfg = cfg_for(base, rollout_reuse=4)  # save_every 2: a due save at update 2 falls inside the first batch
    train_orl(cfg, tmp_path / "a", log=lambda *_: None)
    real, calls = trainer.orl_loss, []

    def crashing(*args, **kw):  # dies in update 3
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
        assert (a[u]["loss"], a[u]["generated_tokens"]) == (b[u]["loss"], b[u]["generated_tokens"])
    assert a[4]["generated_tokens"] == a[1]["generated_tokens"]  # one rollout batch for all four updates


def test_extending_a_run_that_ended_inside_a_batch_is_refused_by_name(base, tmp_path, accept_everything):  # noqa: F811
    cfg = cfg_for(base, rollout_reuse=4)
    train_orl(dataclasses.replace(cfg, updates=2), tmp_path / "r", log=lambda *_: None)  # its last save: update 2
    train_orl(dataclasses.replace(cfg, updates=2), tmp_path / "r", log=lambda *_: None)  # done already: no refusal
    with pytest.raises(ResumeError, match="rollout_reuse=4"):
        train_orl(cfg, tmp_path / "r", log=lambda *_: None)
    train_orl(cfg, tmp_path / "r", log=lambda *_: None, allow_config_change=True)  # the user's explicit choice
    assert sorted(records(tmp_path / "r" / "train.log.jsonl")) == [1, 2, 3, 4]
