"""Discoverable training settings (issue 23 item 4): --help lists recipes and presets, --show-config
prints every field with type and value, a TOML file sets what --set sets, warm-up fits a short run."""
import subprocess
import sys
from pathlib import Path

import pytest

from orl import cli
from orl.overrides import apply_file, describe_config, field_names
from orl.presets import PRESETS, get_preset
from orl.train.pretrain import lr_at

ROOT = Path(__file__).resolve().parents[1]


def test_train_help_lists_every_preset():
    out = subprocess.run([sys.executable, "-m", "orl.cli", "train", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120).stdout
    for recipe, presets in PRESETS.items():
        assert recipe in out and all(name in out for name in presets)


def test_show_config_prints_every_field_with_type_and_value(capsys):
    assert cli.main(["train", "--recipe", "orl", "--preset", "smoke", "--show-config",
                     "--set", "rollout.threshold=0.75"]) == 0
    out = capsys.readouterr().out
    cfg = get_preset("orl", "smoke")
    for key in field_names(cfg):
        assert key in out
    assert "rollout.threshold" in out and "float" in out and "0.75" in out
    assert describe_config(cfg).count("\n") == len(field_names(cfg)) - 1


def test_config_file_sets_nested_fields_and_names_bad_ones(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('lr = 1e-3\nmix = [1, 2, 3, 4, 5]\n[model]\ndim = 48\n')
    cfg = apply_file(get_preset("pretrain", "smoke"), f)
    assert (cfg.lr, cfg.mix, cfg.model.dim) == (1e-3, (1, 2, 3, 4, 5), 48)
    f.write_text('batch_size = "eight"\n')
    with pytest.raises(ValueError, match="run.toml: batch_size: expected int, got 'eight'"):
        apply_file(get_preset("pretrain", "smoke"), f)
    f.write_text('[model]\ndimm = 4\n')
    with pytest.raises(ValueError, match="has no field 'dimm'; valid: dim"):
        apply_file(get_preset("pretrain", "smoke"), f)
    f.write_text('lr = [')
    with pytest.raises(ValueError, match="cannot read config file"):
        apply_file(get_preset("pretrain", "smoke"), f)


def test_warmup_is_at_most_a_tenth_of_a_short_stage():
    import dataclasses

    cfg = dataclasses.replace(get_preset("pretrain", "tiny_base"), ar_steps=50, diffusion_steps=0)
    assert lr_at(cfg, 4) == pytest.approx(cfg.lr)  # warm-up of 5 steps, not 100
    full = get_preset("pretrain", "tiny_base")
    assert lr_at(full, 49) == pytest.approx(full.lr * 50 / 100)  # the shipped recipe is unchanged


def test_a_run_ends_with_a_summary_and_a_rerun_says_it_is_complete(tmp_path):
    from orl.overrides import apply_overrides
    from orl.train.pretrain import pretrain

    cfg = apply_overrides(get_preset("pretrain", "smoke"), ["threads=1", "ar_steps=2", "diffusion_steps=0",
                                                            "save_every=2", "eval_every=2"])
    lines: list[str] = []
    pretrain(cfg, tmp_path / "run", log=lines.append)
    assert lines[-2].startswith("done: steps 1-2 in ") and str(tmp_path / "run") in lines[-2]
    assert lines[-1].startswith("held-out accuracy: mean ")
    lines.clear()
    pretrain(cfg, tmp_path / "run", log=lines.append)
    assert lines[-1] == f"nothing to do: {tmp_path / 'run'} already holds all 2 steps"


def test_the_log_and_stage1_live_inside_out_and_survive_every_save(tmp_path):
    """issue 23 item 8: one directory per run; each checkpoint write carries the log and stage 1 along."""
    import json

    from orl.checkpoint import load_checkpoint
    from orl.overrides import apply_overrides
    from orl.train.pretrain import pretrain

    cfg = apply_overrides(get_preset("pretrain", "smoke"), ["threads=1", "save_every=2"])
    pretrain(cfg, tmp_path / "run", log=lambda *_: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    out = tmp_path / "run"
    assert [json.loads(x)["step"] for x in open(out / "train.log.jsonl")] == list(range(1, 9))
    assert load_checkpoint(out / "stage1")[2]["recipe"]["step"] == 4  # saved at step 4, carried by saves 6, 8
    manifest = json.loads((out / "orl.json").read_text())
    assert "train.log.jsonl" not in manifest["files"] and "stage1" not in manifest["files"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_heldout_summary_leaves_helpers_out_of_the_mean():
    from orl.train.loop import heldout_summary
    line = heldout_summary({"long7xp": {"acc": 0.5}, "constr7xp": {"acc": 1.0}, "long7xph": {"acc": 0.0},
                            "constr7xph": {"acc": 0.0}, "loss": 1.2})
    assert line == ("held-out accuracy: mean 75.0% (long7xp 50.0%, constr7xp 100.0%); "
                    "helpers, not in the mean: long7xph 0.0%, constr7xph 0.0%")
    assert heldout_summary({"split": {"acc": 0.25}}) == "held-out accuracy: mean 25.0% (split 25.0%)"
