"""benchmarks/heldout_leak.py: the marker-free canonical problem of long7xp / prog7xp prompts, 'seen' marking, the
clean / seen accuracy split, the paired McNemar on clean records, and the replay of the pretraining draws against
orl.train.pretrain.make_batches itself."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("heldout_leak", ROOT / "benchmarks" / "heldout_leak.py")
leak = importlib.util.module_from_spec(spec)
sys.modules.setdefault("heldout_leak", leak)  # dataclasses look the module up while the class is made
spec.loader.exec_module(leak)

DECODE = {"rule": "threshold", "block_len": 16, "threshold": 0.9, "residual": "off", "seed": 0, "temperature": 0.0}


def rec(task: str, prompt: str, verdict: bool, model: str = "m", i: int = 0, split: str = "heldout") -> dict:
    return {"task": task, "split": split, "prompt": prompt, "verdict": verdict, "model": {"name": model, "id": model},
            "decode": dict(DECODE), "prompt_id": f"{task}/{split}/{i}", "sample": 0}


def test_canonical_ignores_the_marker_run_only():
    c = leak.canonical
    assert c("prog7xp", "echo h=8;i=h-0;j=i+8:h") == c("prog7xp", "echo c=8;d=c-0;e=d+8:c") \
        == "prog7xp|echo a=8;b=a-0;c=b+8:a"
    assert c("prog7xp", "echo h=8;i=h-0;j=i+8:h") != c("prog7xp", "echo h=8;i=h-0;j=i+7:h")  # another problem
    assert c("long7xp", "cumsum:y3z1A4=y") == c("long7xp", "cumsum:a3b1c4=a") == "long7xp|cumsum:a3b1c4=a"
    assert c("long7xp", "cumsum:a3b1c4=a") != c("long7xp", "cumsum:a3b1c5=a")
    # the filler helper's spaces drop out; long7xpo is long7xp's problem only at offset 0
    assert c("long7xpf", "cumsum:k3l1m4    =k") == c("long7xp", "cumsum:a3b1c4=a")
    assert c("prog7xpf", "echo q=8;r=q-0;s=r+8   :q") == c("prog7xp", "echo c=8;d=c-0;e=d+8:c")
    assert c("long7xpo", "cumsum+0:b3c1d4=b") == c("long7xp", "cumsum:a3b1c4=a")
    assert c("long7xpo", "cumsum+7:b3c1d4=b") is None
    assert c("long7xph", "double:a3b1c4=a") is None and c("split7xp", "?+?=a3b4:a") is None


def test_a_record_is_seen_when_its_canonical_problem_was_trained():
    trained = {leak.canonical("prog7xp", "echo c=8;d=c-0;e=d+8:c")}
    marked = leak.mark_seen([rec("prog7xp", "echo h=8;i=h-0;j=i+8:h", True),
                             rec("prog7xp", "echo h=8;i=h-0;j=i+9:h", True)], trained)
    assert [seen for _, seen in marked] == [True, False]


def test_clean_and_seen_accuracy_split():
    keys = {leak.canonical("long7xp", "cumsum:a3b1c4=a"): {"s/long7xp"},
            leak.canonical("long7xp", "cumsum:a5b5c5d5=a"): {"s/long7xpf"}}
    records = [rec("long7xp", "cumsum:f3g1h4=f", True, i=0),      # seen, right
               rec("long7xp", "cumsum:B5C5D5E5=B", False, i=1),   # seen (through the helper), wrong
               rec("long7xp", "cumsum:f3g1h5=f", True, i=2),      # clean, right
               rec("long7xp", "cumsum:f9g1h5=f", True, i=3)]      # clean, right
    records.append(rec("long7xp", "cumsum:f3g1h4=f", True, i=4, split="beyond"))  # not in range: left out
    rows = leak.summary_rows(leak.mark_seen(leak.in_range(records), keys), keys)
    assert len(rows) == 1
    row = rows[0]
    assert (row["n"], row["acc"]) == (4, "75.0%")
    assert (row["n_clean"], row["acc_clean"], row["n_seen"], row["acc_seen"]) == (2, "100.0%", 2, "50.0%")
    assert row["seen_via_helper"] == 1
    records[2]["verdict"] = False  # clean now 1 of 2, seen still 1 of 2
    records[1]["verdict"] = True   # seen now 2 of 2
    row = leak.summary_rows(leak.mark_seen(leak.in_range(records), keys), keys)[0]
    assert (row["acc"], row["acc_clean"], row["acc_seen"]) == ("75.0%", "50.0%", "100.0%")


def test_paired_mcnemar_counts_clean_records_only():
    keys = {leak.canonical("prog7xp", "echo a=1;b=a+1:a")}
    prompts = ["echo a=1;b=a+1:a", "echo a=2;b=a+1:a", "echo a=3;b=a+1:a", "echo a=4;b=a+1:a"]  # the first is seen
    a = [rec("prog7xp", p, v, "A", i) for i, (p, v) in enumerate(zip(prompts, (True, True, True, False)))]
    b = [rec("prog7xp", p, v, "B", i) for i, (p, v) in enumerate(zip(prompts, (False, False, False, True)))]
    rows = {(r["family"], r["subset"]): r for r in leak.paired_rows(leak.mark_seen(a + b, keys), "A", "B")}
    clean, every = rows[("prog7xp", "clean")], rows[("prog7xp", "all")]
    assert (clean["n_paired"], clean["b (A only)"], clean["c (B only)"]) == (3, 2, 1)
    assert (every["n_paired"], every["b (A only)"], every["c (B only)"]) == (4, 3, 1)
    assert clean["mcnemar_p"] == "1" and rows[("long7xp", "clean")]["n_paired"] == 0


def test_replayed_draws_are_make_batches_draws(monkeypatch):
    """The index stream stage_indices replays is the one orl.train.pretrain.make_batches samples from."""
    from orl.eval.tasks import get_task
    from orl.tokenizer import CharTokenizer
    from orl.train import pretrain
    from orl.train.pretrain_config import PretrainConfig

    stage = leak.base_stages()[-1]
    drawn = []

    class Spy:
        def __init__(self, name):
            self.task = get_task(name)

        def sample(self, split, index):
            drawn.append((self.task.name, index))
            return self.task.sample(split, index)

    monkeypatch.setattr(pretrain, "get_task", Spy)
    cfg = PretrainConfig(tasks=stage.tasks, mix=stage.mix, seed=stage.seed, ar_steps=10, diffusion_steps=0, bf16=False)
    for step in range(2):
        pretrain.make_batches(cfg, CharTokenizer(), step)
    want = {"long7xp": 2 * stage.mix[0], "prog7xp": 2 * stage.mix[1], "long7xpf": 2 * stage.mix[7]}
    assert list(leak.stage_indices(stage, want)) == [d for d in drawn if d[0] in want]


def test_the_base_chain_is_the_ar_stage_then_the_old_base_then_the_base():
    """Since session 54 the shipped base is the old one (five7w-s2d0, git a2a43e7) trained 1,500 more steps: its
    manifest names the old base as `init` checkpoints/orl-tiny7-base at `init_git_commit` a2a43e7."""
    stages = leak.base_stages()
    assert [s.name for s in stages] == ["hint4st-7k-s2", "five7w-s2d0", "orl-tiny7-base"]
    assert (stages[1].seed, stages[1].steps, stages[1].mix[:2]) == (2, 6000, (8, 8))
    assert (stages[2].seed, stages[2].steps, stages[2].mix) == (12, 1500, leak.EXTRA["base7-more"].mix)
    assert leak.with_extra(stages, ["base7-more"]) == stages  # its own stage: not replayed twice
    assert [s.name for s in leak.with_extra(stages[:2], ["base7-more"])] == ["hint4st-7k-s2", "five7w-s2d0", "base7-more"]
    with pytest.raises(ValueError, match="draws are unknown"):
        leak.base_stages(ROOT / "checkpoints" / "orl-tiny7-ar" / "orl.json")  # init five7w-s2: not recorded here


def test_orl_rollouts_must_come_from_the_replayed_base():
    """--orl with another base's chain is refused: the shipped ORL model's base is the shipped base, not the old one.
    (The rollout replay itself is checked against the trainer's draws in tests/test_orl_trainer.py.)"""
    orl_json = ROOT / "checkpoints" / "orl-tiny7-orl" / "orl.json"
    leak.check_orl_base(orl_json, ROOT / "checkpoints" / "orl-tiny7-base" / "orl.json")
    with pytest.raises(SystemExit, match="not those of"):
        leak.check_orl_base(orl_json, ROOT / "checkpoints" / "orl-tiny7-ar" / "orl.json")
