"""The stale-rollout ablation (rollout_reuse > 1): neither a rollout batch nor the weights that rolled it out (L_KL's
reference) are saved, so a checkpoint inside a batch's updates cannot continue that batch. Saves wait for a batch's end
(test_orl_trainer.test_resume_is_exact[4]); a run that ended inside a batch is refused when extended."""
import dataclasses

import pytest

from orl.train.loop import ResumeError
from orl.train.orl import train_orl
from tests.test_orl_trainer import accept_everything, base, cfg_for, records  # noqa: F401 (fixtures)


def test_extending_a_run_that_ended_inside_a_batch_is_refused_by_name(base, tmp_path, accept_everything):  # noqa: F811
    cfg = cfg_for(base, rollout_reuse=4)
    train_orl(dataclasses.replace(cfg, updates=2), tmp_path / "r", log=lambda *_: None)  # its last save: update 2
    train_orl(dataclasses.replace(cfg, updates=2), tmp_path / "r", log=lambda *_: None)  # done already: no refusal
    with pytest.raises(ResumeError, match="rollout_reuse=4"):
        train_orl(cfg, tmp_path / "r", log=lambda *_: None)
    train_orl(cfg, tmp_path / "r", log=lambda *_: None, allow_config_change=True)  # the user's explicit choice
    assert sorted(records(tmp_path / "r" / "train.log.jsonl")) == [1, 2, 3, 4]
