"""The balanced mix (orl.train.mix): hand-computed splits, and a pretraining run that uses it resumes exactly."""
import json

import pytest

from orl.train.mix import EMA_DECAY, MixBalancer, balanced_counts
from test_pretrain import TOK, small_cfg


def test_lagging_member_gets_the_free_rows():
    # long7xp, prog7xp, three helpers: the first two share 24 rows, each keeps 6; the free 12 go by
    # 12 x loss: 0.012 : 3.6, shares 0.0399 / 11.960 -> 0 / 11, the one left over to the larger remainder (prog)
    assert balanced_counts((12, 12, 6, 6, 6), (0, 1), (0.001, 0.3, 5.0, 5.0, 5.0)) == (6, 18, 6, 6, 6)
    # equal losses give the fixed mix back; so do all-zero (or nan) losses
    assert balanced_counts((12, 12, 6, 6, 6), (0, 1), (0.2, 0.2, 0, 0, 0)) == (12, 12, 6, 6, 6)
    assert balanced_counts((12, 12, 6), (0, 1), (0.0, 0.0, 1.0)) == (12, 12, 6)
    assert balanced_counts((12, 12, 6), (0, 1), (float("nan"), float("nan"), 1.0)) == (12, 12, 6)


def test_split_follows_mix_times_loss_with_floors_and_remainders():
    # mix 4 / 2 / 3, all members: floors 2 / 1 / 2, free 4; weights 4x1, 2x1, 3x2 = 4 / 2 / 6 of 12:
    # shares 1.333 / 0.667 / 2.0 -> 1 / 0 / 2, the one left to the largest remainder (0.667: task 1)
    assert balanced_counts((4, 2, 3), (0, 1, 2), (1.0, 1.0, 2.0)) == (3, 2, 4)
    # ties go to the lower index: free 2 over two equal shares of 1 each, none left; with free 1 (mix 1, 1,
    # floors 1 / 1: free 0) nothing moves at all
    assert balanced_counts((3, 3), (0, 1), (1.0, 1.0)) == (3, 3)
    assert balanced_counts((1, 1), (0, 1), (0.0, 9.0)) == (1, 1)
    # a total that does not divide: mix 5 / 5, floors 3 / 3, free 4 by 1 : 1 -> 2 / 2
    assert balanced_counts((5, 5), (0, 1), (1.0, 1.0)) == (5, 5)
    assert sum(balanced_counts((7, 5, 3), (0, 2), (0.3, 0.0, 0.9))) == 15


def test_balancer_ema_restarts_with_the_stage_and_skips_tasks_off():
    b = MixBalancer((12, 0, 12), (0, 2))  # the middle task has no rows: losses come for the other two
    assert b.counts() == (12, 0, 12)  # no loss seen yet
    b.update("ar", [1.0, 1.0])
    b.update("ar", [0.0, 2.0])
    assert b.ema == pytest.approx([EMA_DECAY, EMA_DECAY + 2 * (1 - EMA_DECAY)])
    assert b.counts() == (12, 0, 12)  # 0.98 : 1.02 of 12 free rows: 5.88 / 6.12 -> 6 / 6
    b.update("diffusion", [0.1, 0.5])  # a new stage: its losses, not a blend with the AR stage's
    assert b.ema == [0.1, 0.5] and b.counts() == (8, 0, 16)
    c = MixBalancer((12, 0, 12), (0, 2))
    c.load_state_dict(b.state_dict())
    assert c.counts() == b.counts() and c.stage == "diffusion"
    with pytest.raises(ValueError, match="2 tasks"):
        c.load_state_dict({"stage": "ar", "ema": [1.0, 2.0, 3.0]})


def test_balance_is_validated():
    for bad in [("add",), ("add", "add"), ("add", "nope"), ("add", "long")]:
        with pytest.raises(ValueError, match="balance"):
            small_cfg(tasks=("add", "long", "sort"), mix=(4, 0, 4), balance=bad)
    small_cfg(tasks=("add", "long", "sort"), mix=(4, 0, 4), balance=("add", "sort"))


def test_balanced_run_logs_its_rows_and_resumes_exactly(tmp_path, monkeypatch):
    cfg = small_cfg(tasks=("add", "long", "sort"), mix=(4, 4, 2), balance=("add", "long"), ar_steps=8,
                    diffusion_steps=4, save_every=5)
    from orl.train.pretrain import pretrain
    import orl.train.pretrain as mod

    real, calls = mod.train_step, []

    def lagging_long(*args, crash_at=None, **kw):
        """`long` reported at 10x its loss (a family that lags), so the balancer has rows to move."""
        calls.append(1)
        if len(calls) == crash_at:
            raise KeyboardInterrupt
        loss = real(*args, **kw)
        parts = args[5] if len(args) > 5 else kw["parts"]
        parts[1] = parts[1] * 10
        return loss

    monkeypatch.setattr(mod, "train_step", lagging_long)
    pretrain(cfg, tmp_path / "a", log=lambda *_: None)
    # dies in step 8, after the checkpoint at 5: the resume needs the saved moving average
    calls.clear()
    monkeypatch.setattr(mod, "train_step", lambda *a, **kw: lagging_long(*a, crash_at=8, **kw))
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, tmp_path / "b", log=lambda *_: None)
    monkeypatch.setattr(mod, "train_step", lagging_long)
    pretrain(cfg, tmp_path / "b", log=lambda *_: None)

    def records(run):
        return [json.loads(line) for line in open(tmp_path / run / "train.log.jsonl")]

    a, b = records("a"), records("b")
    assert len(a) == 12
    assert [(r["step"], r["loss"], r["rows"]) for r in a] == [(r["step"], r["loss"], r["rows"]) for r in b]
    assert a[0]["rows"] == {"add": 4, "long": 4, "sort": 2}  # no loss seen before the first step
    # `long` at 10x: 4 x 10 : 4 x 1 of the 4 free rows -> 3.6 / 0.4 -> long 2 + 4, add 2 + 0; sort keeps 2
    assert all(r["rows"] == {"add": 2, "long": 6, "sort": 2} for r in a[1:])
    # a batch follows the counts it is given
    assert [x.tokens.shape[0] for x in mod.make_batches(cfg, TOK, 0, (2, 6, 2))] == [2, 6, 2]
