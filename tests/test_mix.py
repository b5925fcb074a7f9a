"""The balanced mix (orl.train.mix): hand-computed splits, and a pretraining run that uses it resumes exactly."""
import json

import pytest
import torch

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
    # a tie: mix 4 / 2, floors 2 / 1, free 3; weights 4 / 4 -> shares 1.5 / 1.5 -> 1 / 1, the one left to index 0
    assert balanced_counts((4, 2), (0, 1), (1.0, 2.0)) == (4, 2)
    # mix 1 / 1 keeps 1 / 1 whatever the losses: nothing is over the floors
    assert balanced_counts((1, 1), (0, 1), (0.0, 9.0)) == (1, 1)
    # mix 7 / 5 / 3, members 0 and 2: floors 4 / 2, free 4; weights 7 x 0.3 = 2.1, 3 x 0.9 = 2.7 ->
    # shares 1.75 / 2.25 -> 1 / 2, the one left to task 0 (0.75): 4 + 2, 2 + 2; task 1 keeps 5
    assert balanced_counts((7, 5, 3), (0, 2), (0.3, 0.0, 0.9)) == (6, 5, 4)
    # 12 / 12 at losses 1 : 3 -> 6 + 3, 6 + 9 (the module docstring's example)
    assert balanced_counts((12, 12), (0, 1), (1.0, 3.0)) == (9, 15)
    # a loss that is not finite gives the fixed mix (a diverging run must not crash in the mix)
    assert balanced_counts((12, 12), (0, 1), (float("inf"), 1.0)) == (12, 12)
    with pytest.raises(ValueError, match="1 losses for 2 tasks"):
        balanced_counts((12, 12), (0, 1), (1.0,))


def test_balancer_ema_restarts_with_the_stage_and_skips_tasks_off():
    b = MixBalancer(("a", "b", "c"), (12, 0, 12), ("a", "c"))  # b has no rows: losses come for a and c
    assert b.counts("ar") == (12, 0, 12)  # no loss seen yet
    b.update("ar", [1.0, 1.0])
    b.update("ar", [0.0, 2.0])
    assert b.ema == pytest.approx({"a": EMA_DECAY, "c": EMA_DECAY + 2 * (1 - EMA_DECAY)})
    assert b.counts("ar") == (12, 0, 12)  # 0.98 : 1.02 of 12 free rows: 5.88 / 6.12 -> 6 / 6
    b.update("ar", [float("nan"), 2.0])  # a loss that is not finite leaves its average alone
    assert b.ema["a"] == pytest.approx(EMA_DECAY)
    assert b.counts("diffusion") == (12, 0, 12)  # the first step of a stage: no loss of it seen yet
    b.update("diffusion", [0.1, 0.5])  # a new stage: its losses, not a blend with the AR stage's
    assert b.ema == {"a": 0.1, "c": 0.5} and b.counts("diffusion") == (8, 0, 16)
    c = MixBalancer(("a", "b", "c"), (12, 0, 12), ("a", "c"))
    assert c.load_state_dict(b.state_dict()) is None
    assert c.counts("diffusion") == b.counts("diffusion") and c.stage == "diffusion"
    with pytest.raises(ValueError, match="1 losses for the 2 tasks"):
        c.update("diffusion", [1.0])
    # saved for other tasks (a run branched with another task list): refused by name, the averages restart
    d = MixBalancer(("a", "x", "c"), (12, 1, 12), ("a", "c"))
    assert "restart" in d.load_state_dict(b.state_dict()) and d.ema is None


def test_balance_is_validated():
    for bad, message in [(("add",), "two or more"), (("add", "add"), "add twice"),
                         (("add", "nope"), "nope, not among the tasks"), (("add", "long"), "long, which the mix")]:
        with pytest.raises(ValueError, match=message):
            small_cfg(tasks=("add", "long", "sort"), mix=(4, 0, 4), balance=bad)
    with pytest.raises(ValueError, match="can move no rows"):
        small_cfg(tasks=("add", "long", "sort"), mix=(1, 1, 4), balance=("add", "long"))
    small_cfg(tasks=("add", "long", "sort"), mix=(4, 0, 4), balance=("add", "sort"))


def test_balanced_run_logs_its_rows_and_resumes_exactly(tmp_path, monkeypatch):
    cfg = small_cfg(tasks=("add", "long", "sort"), mix=(4, 4, 2), balance=("add", "long"), ar_steps=8,
                    diffusion_steps=4, save_every=5)
    from orl.train.pretrain import pretrain
    import orl.train.pretrain as mod

    real = mod.train_step
    at = {"step": 0, "crash": None}  # the step train_step is running (1-based), and where to die

    def scaled(*args, **kw):
        """`long` reported at 10x its loss, and `add` at 1000x in steps 3 and 7: the counts move both ways,
        so a resume that restores the wrong averages draws other rows."""
        at["step"] += 1
        if at["step"] == at["crash"]:
            raise KeyboardInterrupt
        loss = real(*args, **kw)
        parts = args[5] if len(args) > 5 else kw["parts"]
        parts[1] = parts[1] * 10
        if at["step"] in (3, 7):
            parts[0] = parts[0] * 1000
        return loss

    monkeypatch.setattr(mod, "train_step", scaled)
    pretrain(cfg, tmp_path / "a", log=lambda *_: None)
    at.update(step=0, crash=8)  # dies in step 8, after the checkpoint at 5: the resume needs the saved averages
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, tmp_path / "b", log=lambda *_: None)
    at.update(step=5, crash=None)
    pretrain(cfg, tmp_path / "b", log=lambda *_: None)

    def records(run):
        return [json.loads(line) for line in open(tmp_path / run / "train.log.jsonl")]

    a, b = records("a"), records("b")
    assert len(a) == 12
    assert [(r["step"], r["loss"], r["rows"]) for r in a] == [(r["step"], r["loss"], r["rows"]) for r in b]
    rows = [r["rows"] for r in a]
    assert rows[0] == {"add": 4, "long": 4, "sort": 2}  # no loss seen before the first step
    assert rows[8] == {"add": 4, "long": 4, "sort": 2}  # nor before the first diffusion step
    # `long` at 10x: the free 4 rows go 3.64 / 0.36 -> long 2 + 4, add 2 + 0 (this holds while the real `add`
    # loss stays below 10/7 of `long`'s); after step 3's 1000x the average of `add` leads: rows go back to it
    assert rows[1] == rows[2] == {"add": 2, "long": 6, "sort": 2}
    assert rows[3]["add"] > 2 and all(r["sort"] == 2 and r["add"] + r["long"] == 8 for r in rows)
    # the averages at the end of stage 1 (saved in stage1/) agree to the bit
    states = [torch.load(tmp_path / run / "stage1" / "trainer_state.pt", weights_only=True) for run in "ab"]
    assert states[0]["mix_balance"] == states[1]["mix_balance"] and states[0]["mix_balance"]["stage"] == "ar"
    # a batch follows the counts it is given
    assert [x.tokens.shape[0] for x in mod.make_batches(cfg, TOK, 0, (2, 6, 2))] == [2, 6, 2]
