"""Training runs and the CLI under hostile or careless use (issue 16 items 4, 5, 7, 8): a kill at any
point resumes, a changed config is refused on resume, every bad flag is one line naming it, exit 2."""
import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from orl import cli
from orl.overrides import apply_overrides
from orl.presets import get_preset
from orl.train.loop import ResumeError
from orl.train.pretrain import pretrain

ROOT = Path(__file__).resolve().parents[1]
QUIET = dict(log=lambda *_: None)


def smoke(**kw):
    return apply_overrides(get_preset("pretrain", "smoke"), [f"{k}={v}" for k, v in {"threads": 1, **kw}.items()])


def steps_logged(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in open(out / "train.log.jsonl")]


# ---------------------------------------------------------------- resume

def test_resume_refuses_a_changed_config_with_the_diff(tmp_path):
    pretrain(smoke(), tmp_path / "run", **QUIET)
    changed = smoke(seed=7, lr=0.5, diffusion_steps=6)
    with pytest.raises(ResumeError, match=r"(?s)diffusion_steps: 4 -> 6.*lr: 0.003 -> 0.5.*seed: 0 -> 7"):
        pretrain(changed, tmp_path / "run", **QUIET)
    pretrain(changed, tmp_path / "run", allow_config_change=True, **QUIET)  # continues: 8 -> 10 steps
    assert steps_logged(tmp_path / "run") == list(range(1, 11))


def test_cadence_fields_may_change_on_resume(tmp_path):
    pretrain(smoke(ar_steps=2, diffusion_steps=0, save_every=2), tmp_path / "run", **QUIET)
    pretrain(smoke(ar_steps=2, diffusion_steps=0, save_every=1, eval_samples=1), tmp_path / "run", **QUIET)


KILLED_RUN = textwrap.dedent("""
    import os, sys
    from orl.overrides import apply_overrides
    from orl.presets import get_preset
    from orl.train.pretrain import pretrain
    real, n = os.rename, [0]
    def rename(a, b):
        if {match!r} in os.path.basename(a):
            n[0] += 1
            if n[0] == {kill_at}:
                os._exit(9)
        real(a, b)
    os.rename = rename
    cfg = apply_overrides(get_preset("pretrain", "smoke"), ["threads=1", "save_every=2"])
    pretrain(cfg, {out!r}, log=lambda *_: None)
""")


def run_killed(out: Path, match: str, kill_at: int) -> None:
    code = KILLED_RUN.format(match=match, kill_at=kill_at, out=str(out))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, r.stderr[-2000:]


def test_a_kill_between_the_two_renames_resumes_instead_of_restarting(tmp_path):
    out = tmp_path / "run"
    # renames of `run`: step 2 save (no old copy: 1 rename), step 4 save: aside (2), then tmp (3) - killed there
    run_killed(out, ".run.tmp-", kill_at=2)
    assert not out.exists()
    pretrain(smoke(save_every=2), out, **QUIET)
    assert steps_logged(out) == list(range(1, 9))  # 1-4 kept, 5-8 new: never restarted at 0


def test_a_kill_during_the_stage1_save_does_not_lose_stage1(tmp_path):
    out = tmp_path / "run"
    run_killed(out, ".stage1.tmp-", kill_at=1)
    assert not (out / "stage1").exists()
    pretrain(smoke(save_every=2), out, **QUIET)
    from orl.checkpoint import load_checkpoint

    assert load_checkpoint(out / "stage1")[2]["recipe"]["step"] == 4


# ---------------------------------------------------------------- --set

@pytest.mark.parametrize("item, message", [
    ("save_every=0", "save_every must be > 0, got 0"),
    ("batch_size=0", "batch_size must be > 0, got 0"),
    ("lr=inf", "lr must be finite, got inf"),  # before: trained on NaN, saved unloadable weights
    ("model.dim=-4", "dim must be > 0, got -4"),
    ("lr=abc", "--set lr=abc: expected a number"),
    ("ar_steps=-3", "ar_steps must be >= 0, got -3"),
    ("mix=1,2,3", "mix (1, 2, 3) must give a count >= 0 for each of the tasks"),
    ("model.n_kv_heads=3", "n_heads (2) must be a multiple of n_kv_heads (3)"),
    ("bf16=maybe", "expected true or false"),
    ("lerning_rate=1", "has no field 'lerning_rate'"),
    ("model=3", "'model' is a group of settings; set one of model.vocab_size"),
])
def test_bad_overrides_are_named(item, message):
    with pytest.raises(ValueError) as e:
        apply_overrides(get_preset("pretrain", "smoke"), [item])
    assert message in str(e.value)


def test_overrides_are_typed_and_nested():
    cfg = apply_overrides(get_preset("pretrain", "smoke"), ["mix=1,2,3,4,5", "model.dim=48", "bf16=false", "lr=1e-3"])
    assert cfg.mix == (1, 2, 3, 4, 5) and cfg.model.dim == 48 and cfg.bf16 is False and cfg.lr == 1e-3
    orl = apply_overrides(get_preset("orl", "smoke"), ["rollout.threshold=0.7", "weights.rho=0.5", "tasks=long,prog"])
    assert (orl.rollout.threshold, orl.weights.rho, orl.tasks) == (0.7, 0.5, ("long", "prog"))
    with pytest.raises(ValueError, match="threshold must be in"):
        apply_overrides(orl, ["rollout.threshold=2"])


def test_unknown_key_lists_the_closest_first():
    with pytest.raises(ValueError, match=r"no field 'save_evry'; valid: save_every, "):
        apply_overrides(get_preset("pretrain", "smoke"), ["save_evry=3"])


# ---------------------------------------------------------------- the CLI: one line, exit 2

def run_cli(capsys, *argv) -> str:
    rc = cli.main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2, err
    said = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("orl ")]
    assert "Traceback" not in err and len(said) == 1, err  # progress bars aside, one line
    return said[0]


@pytest.mark.parametrize("sets, message", [
    (["save_every=0"], "save_every must be > 0"),
    (["ar_steps=-1"], "ar_steps must be >= 0"),
    (["ar_steps=0", "diffusion_steps=0"], "nothing to train"),
    (["lr=abc"], "--set lr=abc"),
])
def test_train_flags(tmp_path, capsys, sets, message):
    argv = ["train", "--preset", "smoke", "--out", str(tmp_path / "run")]
    for s in sets:
        argv += ["--set", s]
    assert message in run_cli(capsys, *argv)
    assert not (tmp_path / "run").exists()


def test_disk_full_and_read_only_are_said(tmp_path, capsys, monkeypatch):
    import orl.checkpoint as ck

    for code, said in ((errno.ENOSPC, "no space left on device"), (errno.EROFS, "read-only file system")):
        def fail(*a, code=code, **k):
            raise OSError(code, "simulated", str(tmp_path / "run"))

        monkeypatch.setattr(ck, "save_file", fail)
        err = run_cli(capsys, "train", "--preset", "smoke", "--out", str(tmp_path / "run"), "--set", "threads=1",
                      "--set", "ar_steps=2", "--set", "diffusion_steps=0", "--set", "save_every=2")
        assert said in err and str(tmp_path / "run") in err
        assert not any(p.name.startswith(".run.tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["generate", "ab", "--model", "{ck}", "--block-len", "0"], "block_len must be > 0"),
    (["generate", "ab", "--model", "{ck}", "--device", "tpu"], "unknown device 'tpu'"),
    (["generate", "ab", "--model", "{ck}/model.safetensors"], "is a file; give the checkpoint directory"),
    (["info", "{ck}/nope"], "does not exist"),
])
def test_decode_flags(tmp_path, capsys, argv, message):
    from test_checkpoint_safety import TOK, model
    from orl.checkpoint import save_checkpoint

    ck = save_checkpoint(model(), TOK, tmp_path / "ck")
    assert message in run_cli(capsys, *[a.format(ck=ck) for a in argv])


def test_cuda_without_cuda_is_named(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from test_checkpoint_safety import TOK, model
    from orl.checkpoint import save_checkpoint

    ck = save_checkpoint(model(), TOK, tmp_path / "ck")
    assert "CUDA is not available" in run_cli(capsys, "generate", "ab", "--model", str(ck), "--device", "cuda")


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(FileNotFoundError):
        cli.main(["info", str(tmp_path / "nope"), "--debug"])


def test_a_failed_eval_leaves_no_empty_records_file(tmp_path, capsys):
    from test_checkpoint_safety import TOK, model
    from orl.checkpoint import save_checkpoint

    ck = save_checkpoint(model(), TOK, tmp_path / "ck")  # a 64-token context: the first generate fails
    out = tmp_path / "rec.jsonl"
    assert "exceeds the context" in run_cli(capsys, "eval", "--model", str(ck), "--tasks", "long", "--limit", "1",
                                             "--max-new-tokens", "64", "--out", str(out), "--no-progress")
    assert not out.exists()


def test_a_field_added_since_the_run_started_does_not_block_resume():
    from orl.train.loop import config_diff

    saved = {"lr": 0.1, "model": {"dim": 8}}
    new = {"lr": 0.1, "model": {"dim": 8, "topk_group": 1}}
    assert config_diff(saved, new, defaults={"model": {"topk_group": 1}}) == []
    assert config_diff(saved, {**new, "model": {"dim": 8, "topk_group": 2}}, defaults={"model": {"topk_group": 1}}) \
        == ["model.topk_group: '<absent>' -> 2"]


def test_settings_checked_together_change_together():
    """tasks and mix are checked against each other: both orders work, and a mismatch names both settings."""
    base = get_preset("pretrain", "smoke")
    for items in (["tasks=long,prog", "mix=3,1"], ["mix=3,1", "tasks=long,prog"]):
        cfg = apply_overrides(base, items)
        assert cfg.tasks == ("long", "prog") and cfg.mix == (3, 1)
    assert apply_overrides(base, ["lr=1e-3", "lr=2e-3"]).lr == 2e-3  # a later item wins
    with pytest.raises(ValueError, match=r"--set tasks=long,prog; --set mix=3,1,1: .*mix \(3, 1, 1\) must give"):
        apply_overrides(base, ["tasks=long,prog", "mix=3,1,1"])


def test_a_file_and_set_are_checked_together(tmp_path):
    f = tmp_path / "mix.toml"
    f.write_text("mix = [3, 1]\n")
    cfg = apply_overrides(get_preset("pretrain", "smoke"), ["tasks=long,prog"], f)  # mix from the file
    assert cfg.tasks == ("long", "prog") and cfg.mix == (3, 1)
    assert apply_overrides(get_preset("pretrain", "smoke"), ["tasks=long,prog", "mix=1,1"], f).mix == (1, 1)  # --set wins


def test_a_nested_failure_names_the_nested_setting():
    with pytest.raises(ValueError, match=r"rollout.threshold=2.*threshold must be in"):
        apply_overrides(get_preset("orl", "smoke"), ["eval_every=5", "rollout.threshold=2"])


def test_non_finite_weights_are_never_saved_over_a_good_checkpoint(tmp_path, monkeypatch):
    """Before: a run whose weights went NaN saved them over its last good checkpoint, which nothing loads."""
    import orl.train.loop as loop

    out = tmp_path / "run"
    pretrain(smoke(save_every=2), out, **QUIET)  # a good run to the end (8 steps)
    good = (out / "model.safetensors").read_bytes()
    real = loop.full_state

    def poisoned(model, opt):
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        return real(model, opt)

    monkeypatch.setattr(loop, "full_state", poisoned)
    with pytest.raises(FloatingPointError, match="non-finite weights .* keeps the last good checkpoint"):
        pretrain(smoke(save_every=2, diffusion_steps=6), out, allow_config_change=True, **QUIET)
    assert (out / "model.safetensors").read_bytes() == good
