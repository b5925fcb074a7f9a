"""Length-varied pretraining (tasks v7): random start positions for the learned position table, and
the tiny_base7 preset's budget and fit."""
import importlib.util
from pathlib import Path

import pytest
import torch

from orl.model.model import Transformer
from orl.model.vocab import special_ids
from orl.presets import get_preset
from orl.tokenizer import CharTokenizer
from orl.train.batches import ar_batch, diffusion_batch, shift_positions, stretch_positions
from orl.train.pretrain import PretrainConfig, make_batches

ROOT = Path(__file__).resolve().parent.parent

TOK = CharTokenizer()


def test_shift_positions_stays_in_the_table_and_keeps_relative_order():
    pairs = [([5] * n, [8] * 9) for n in (3, 7, 12, 30)] * 16
    b = ar_batch(pairs, TOK.pad_id, TOK.eos_id)
    before = b.pos.clone()
    shift_positions(b, 64, 0.5, torch.Generator().manual_seed(0))
    delta = b.pos - before
    assert (delta == delta[:, :1]).all()            # one offset per row: relative positions unchanged
    assert int(b.pos.max()) <= 63                   # never past the table
    shifted = (delta[:, 0] > 0).float().mean()
    assert 0.25 < shifted < 0.75                    # about half the rows move
    assert int(b.pos.max()) > int(before.max()) + 10  # and they reach rows the lengths alone never do
    b2 = ar_batch(pairs, TOK.pad_id, TOK.eos_id)
    shift_positions(b2, 64, 0.0, torch.Generator().manual_seed(0))
    assert torch.equal(b2.pos, before)              # frac 0 moves nothing


def test_stretch_positions_hand_computed_row():
    b = ar_batch([([5, 5], [8])], TOK.pad_id, TOK.eos_id)       # prompt 2 + answer 1 + EOS -> 3 inputs
    assert b.pos.tolist() == [[0, 1, 2]]
    stretch_positions(b, 1.0, 1.0, torch.Generator().manual_seed(3))   # stretch 1: 3 of range(3), sorted
    assert b.pos.tolist() == [[0, 1, 2]]
    # a 9-position row (prompt 8 + answer 1 + EOS, less the last input) at stretch <= 3: the same draws,
    # made by hand, give its new positions
    b = ar_batch([([5] * 8, [8])], TOK.pad_id, TOK.eos_id)
    gen = torch.Generator().manual_seed(3)
    torch.rand(1, generator=gen)                                 # the row's on/off draw
    s = 1.0 + float(torch.rand(1, generator=gen)) * 2.0
    room = int(torch.ceil(torch.tensor(s * 9)))
    want = torch.randperm(room, generator=gen)[:9].sort().values.tolist()
    stretch_positions(b, 1.0, 3.0, torch.Generator().manual_seed(3))
    assert b.pos.tolist() == [want] and want != list(range(9)) and room > 9


def test_stretch_positions_keeps_order_and_ties_and_spreads_distances():
    pairs = [([5] * n, [8] * 9) for n in (3, 7, 12, 30)] * 16
    b = ar_batch(pairs, TOK.pad_id, TOK.eos_id)
    before = b.pos.clone()
    stretch_positions(b, 0.5, 2.0, torch.Generator().manual_seed(0))
    moved = (b.pos != before).any(dim=1)
    assert 0.25 < moved.float().mean() < 0.75                  # about half the rows
    for r in range(b.pos.shape[0]):
        p, q = before[r], b.pos[r]
        # a monotone map of values: equal stays equal (left pads share the first token's 0), order is kept
        assert torch.equal(p[1:] == p[:-1], q[1:] == q[:-1]) and bool((q[1:] >= q[:-1]).all())
        assert int(q.max()) < 2 * (int(p.max()) + 1)            # within the row's room at stretch <= 2
    span = (b.pos.max(1).values - b.pos.min(1).values).float()
    assert bool((span[moved] > (before.max(1).values - before.min(1).values).float()[moved]).any())
    # diffusion rows: a noisy copy and its clean row share positions before, and still do after
    ids = special_ids(TOK, TOK.vocab_size)
    d = diffusion_batch([([5] * 6, [8] * 10)] * 4, 4, ids, torch.Generator().manual_seed(1), 1)
    pos0 = d.pos.clone()
    stretch_positions(d, 1.0, 2.0, torch.Generator().manual_seed(2))
    for r in range(d.pos.shape[0]):
        for i in range(pos0.shape[1]):
            for j in range(pos0.shape[1]):
                assert (pos0[r, i] == pos0[r, j]) == (d.pos[r, i] == d.pos[r, j])
    b2 = ar_batch(pairs, TOK.pad_id, TOK.eos_id)
    stretch_positions(b2, 0.0, 2.0, torch.Generator().manual_seed(0))
    assert torch.equal(b2.pos, before)                         # frac 0 moves nothing


def test_pos_stretch_config_leaves_the_plain_batches_alone():
    cfg = get_preset("pretrain", "tiny_base7h")
    from dataclasses import replace
    st = replace(cfg, pos_stretch=0.5)
    for step in (0, 5):
        plain, stretched = make_batches(cfg, TOK, step), make_batches(st, TOK, step)
        assert len(plain) == len(stretched)
        for a, c in zip(plain, stretched):   # same rows, tokens, targets and masks: only RoPE positions differ
            assert torch.equal(a.tokens, c.tokens) and torch.equal(a.mask, c.mask) and torch.equal(a.targets, c.targets)
        assert any(not torch.equal(a.pos, c.pos) for a, c in zip(plain, stretched))
    with pytest.raises(ValueError, match="pos_stretch"):
        replace(cfg, pos_stretch=1.5)
    with pytest.raises(ValueError, match="pos_stretch_max"):
        replace(cfg, pos_stretch=0.5, pos_stretch_max=0.5)
    with pytest.raises(ValueError, match="learned_pos"):
        replace(get_preset("pretrain", "tiny_base7"), pos_stretch=0.5)
    for bad in (float("nan"), float("inf"), 1e7):
        with pytest.raises(ValueError, match="pos_stretch_max"):
            replace(cfg, pos_stretch=0.5, pos_stretch_max=bad)
    local = replace(cfg.model, layer_types=["sliding_attention", "full_attention"] * (cfg.model.n_layers // 2),
                    sliding_window=8)
    with pytest.raises(ValueError, match="sliding-window"):
        replace(cfg, model=local, pos_stretch=0.5)
    # the block-diffusion stage's staircase rows and the next-token rows beside them keep everything but positions
    st2 = replace(cfg, pos_stretch=1.0, ar_aux=1.0)
    plain2 = replace(cfg, ar_aux=1.0)
    for a, c in zip(make_batches(plain2, TOK, cfg.ar_steps + 3), make_batches(st2, TOK, cfg.ar_steps + 3)):
        assert torch.equal(a.tokens, c.tokens) and torch.equal(a.mask, c.mask) and torch.equal(a.weight, c.weight)
        assert (a.read_from is None) == (c.read_from is None)
        assert a.read_from is None or torch.equal(a.read_from, c.read_from)
        assert bool((c.pos[:, 1:] >= c.pos[:, :-1]).all()) or a.read_from is not None  # order kept on AR rows
        assert not torch.equal(a.pos, c.pos)                   # and every kind of row was stretched (frac 1)


def test_stretch_positions_on_rows_that_share_memory():
    from orl.train.batches import next_token_batch

    b = next_token_batch(torch.randint(0, 50, (4, 9)))     # pos is one row expanded to four
    stretch_positions(b, 1.0, 3.0, torch.Generator().manual_seed(0))
    assert int(b.pos.max()) < 3 * 8                          # each row stretched once, not four times over


def test_pos_offset_trains_every_row_and_leaves_other_presets_alone():
    cfg = get_preset("pretrain", "tiny_base7")
    seen = torch.zeros(cfg.model.max_seq_len, dtype=torch.bool)
    for step in (0, 1, 2, cfg.ar_steps + 1):
        for b in make_batches(cfg, TOK, step):
            assert int(b.pos.max()) < cfg.model.max_seq_len
            seen[b.pos.flatten()] = True
    assert seen.float().mean() > 0.9
    # Presets without the knob draw the batches they always drew.
    base = get_preset("pretrain", "tiny_base")
    assert base.pos_offset == 0.0
    with pytest.raises(ValueError, match="pos_offset"):
        PretrainConfig(pos_offset=1.5)


def test_tiny_base7_budget():
    cfg = get_preset("pretrain", "tiny_base7")
    n = sum(p.numel() for p in Transformer(cfg.model).parameters())
    assert n * 4 < 10_000_000                        # fp32 weights well under the 15 MB shipping budget
    assert cfg.tasks == ("split7", "keysort7", "prog7", "constr7", "long7") and cfg.eval_max_new_tokens >= 80


def test_tiny_orl7_rollouts_fit_long7():
    from orl.eval.tasks import SUITE_V7, get_task

    cfg = get_preset("orl", "tiny_orl7")
    longest = max(len(get_task(n).sample("train", i).answer) for n in SUITE_V7 for i in range(300))
    assert longest + 1 <= cfg.rollout.max_new_tokens  # in-range answers + EOS fit the rollout budget


def length_table():
    """benchmarks/length_table.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("length_table", ROOT / "benchmarks" / "length_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eval_runs_the_beyond_split(tmp_path):
    """`orl eval --split beyond` end to end (the shipped base on two long7 prompts past 20 digits), and
    benchmarks/length_table.py reads its records: ratio-of-sums TPF, not the per-sample mean."""
    from orl.eval.runner import EvalSpec, run_eval

    recs = run_eval(EvalSpec(model=str(ROOT / "checkpoints" / "orl-tiny-base"), out=str(tmp_path / "r.jsonl"),
                             tasks=["long7"], split="beyond", limit=2, decode={"max_new_tokens": 112}, progress=False))
    assert [r["split"] for r in recs] == ["beyond"] * 2
    assert all(len(r["prompt"]) - len("cumsum:=") > 20 for r in recs)
    lt = length_table()
    rows = dict(lt.table(recs, by_size=False))
    (key,) = [k for k in rows if k[-1] == "long7"]
    fwd = sum(r["forwards"]["step"] + r["forwards"]["commit"] for r in recs)
    assert rows[key]["tpf"] == pytest.approx(sum(r["n_tokens"] for r in recs) / fwd)


def test_by_seed_rows_split_the_all_row_by_prompt_seed():
    lt = length_table()

    def rec(task, i, seed, ok, tokens, fwd):
        return {"model": {"name": "A", "id": "A"}, "task": task, "split": "heldout", "prompt_id": f"{task}/heldout/{i}",
                "sample": 0, "verdict": ok, "n_tokens": tokens, "finished": True, "forwards": {"step": fwd, "commit": 0},
                "decode": {"rule": "ar", "residual": "off", "seed": seed}}
    recs = [rec("long7", 0, 0, True, 6, 3), rec("long7", 1, 0, False, 4, 1), rec("long7", 0, 1, True, 9, 3),
            rec("long7h", 0, 1, True, 50, 1)]  # a helper: in no "all" row
    rows = {k[-1]: v for k, v in lt.table(recs, by_size=False, by_seed=True)}
    assert (rows["all@seed0"]["n"], rows["all@seed0"]["acc"], rows["all@seed0"]["tpf"]) == (2, 0.5, 10 / 4)
    assert (rows["all@seed1"]["n"], rows["all@seed1"]["tpf"]) == (1, 3.0)
    assert rows["all"]["n"] == 3 and "all@seed0" not in dict((k[-1], v) for k, v in lt.table(recs, by_size=False))


def test_paired_table_counts_and_leaves_helpers_out_of_all():
    """length_table --paired: per split and family, the prompts both models answered, right in each,
    right in only one, and the exact McNemar p (hand-computed); a helper task is its own row, not in "all"."""
    lt = length_table()

    def rec(model, task, split, i, ok, seed=0, threshold=None):
        return {"model": {"name": model, "id": model}, "task": task, "split": split, "prompt_id": f"{task}/{split}/{i}",
                "sample": 0, "verdict": ok, "decode": {"rule": "ar", "residual": "off", "seed": seed, "threshold": threshold}}
    recs = [rec("A", "long7", "beyond", i, i < 3) for i in range(5)] + [rec("B", "long7", "beyond", i, False) for i in range(5)]
    recs += [rec("A", "long7h", "beyond", 0, True), rec("B", "long7h", "beyond", 0, False)]
    recs += [rec("A", "split7", "beyond", 9, False)]  # only A answered it: not paired
    rows = {(s, f): rest for s, f, *rest in lt.paired(recs, "A", "B")}
    assert rows[("beyond", "long7")] == [5, 3, 0, 3, 0, 0.25]     # 2 * (1/2)^3
    assert rows[("beyond", "long7h")] == [1, 1, 0, 1, 0, 1.0]
    assert rows[("beyond", "all")] == [5, 3, 0, 3, 0, 0.25]       # the helper is not in the mean
    with pytest.raises(SystemExit, match="no records of C"):
        lt.paired(recs, "A", "C")
    with pytest.raises(SystemExit, match="same model"):
        lt.paired(recs, "A", "A")
    # another prompt seed of A is not paired with B's seed-0 prompt of the same index
    seeds = {(s, f): rest for s, f, *rest in lt.paired(recs + [rec("A", "long7", "beyond", 0, False, seed=1)], "A", "B")}
    assert seeds[("beyond", "long7")] == [5, 3, 0, 3, 0, 0.25]
    with pytest.raises(SystemExit, match="share no prompt"):
        lt.paired([rec("A", "long7", "beyond", 0, True, seed=1), rec("B", "long7", "beyond", 0, True)], "A", "B")
    # a threshold sweep would pair whichever record came last: refused
    sweep = [rec("A", "long7", "beyond", 0, True, threshold=0.5), rec("A", "long7", "beyond", 0, False, threshold=0.9)]
    with pytest.raises(SystemExit, match="2 decoders or thresholds"):
        lt.paired(sweep + [rec("B", "long7", "beyond", 0, True)], "A", "B")
    # ... unless each side names one decoder of it: MODEL/DECODER/TAU, two decoders of one model paired
    both = lt.paired(sweep, "A/AR/0.5", "A/AR/0.9")
    assert both[0][:7] == ("beyond", "long7", 1, 1, 0, 1, 0)


def test_running_steps_judge_each_sum_against_the_models_own_previous_one():
    steps = length_table().running_steps
    # 3 -> 4 (right), 4 + 4 = 8 written 9 (wrong), 9 + 2 = 11 (right against its own 9), then a wrong marker
    assert steps("cumsum:a3b1c4d2e5=a", "3b4c9d11X16") == [(1, 3, True), (2, 4, True), (3, 8, False), (4, 11, True)]
    assert steps("cumsum:a3b1=", "a3b4") == [(1, 3, True), (2, 4, True)]   # long7x: no prefilled marker


def test_chain_steps_apply_each_statement_to_the_models_own_previous_value():
    steps = length_table().chain_steps
    # e = 3 + 4 written 8 (wrong); f = 9 - e is 1 against its own 8 (right); g = f + 2 = 3 (right)
    assert steps("echo d=3;e=d+4;f=9-e;g=f+2:d", "=3,e=8,f=1,g=3") == [
        (1, 3, True), (2, 7, False), (3, 1, True), (4, 3, True)]
    assert steps("echo d=3;e=3+d;f=e-2:", "d=3,e=6,g=4") == [(1, 3, True), (2, 6, True)]  # prog7x; wrong variable
    assert steps("echo d=3;e=d-4:d", "=3,e=-1") == [(1, 3, True), (2, -1, True)]  # a negative value is read
    assert steps("echo d=3;e=d+4:d", "=3,e=x") == [(1, 3, True)]                  # an unreadable value ends it


def test_first_errors_count_each_answer_until_its_first_wrong_element(capsys):
    lt = length_table()

    def rec(split, i, prompt, output):
        return {"model": {"name": "A", "id": "A"}, "task": "prog7xp", "split": split, "prompt_id": f"prog7xp/{split}/{i}",
                "sample": 0, "verdict": False, "decode": {"rule": "ar", "residual": "off", "threshold": None},
                "prompt": prompt, "output_text": output}
    p = "echo d=3;e=d+4;f=e-2:d"
    recs = [rec("heldout", 0, p, "=3,e=7,f=5"),       # right throughout
            rec("heldout", 1, p, "=3,e=8,f=6"),       # e wrong: f (right against its own 8) is never reached
            rec("beyond", 0, p, "=4,e=8,f=6")]        # wrong from the first element
    lt.print_first_errors(recs, 3)
    rows = {line.split()[3]: line.split()[5:] for line in capsys.readouterr().out.splitlines() if " prog7xp " in line}
    assert rows["heldout"] == ["2/2", "1/2", "1/1"] and rows["beyond"] == ["0/1", "-", "-"]
    # prog7xpf's spaces before the ':' do not hide its last statement
    assert lt.chain_steps("echo d=3;e=d+4   :d", "=3,e=7") == [(1, 3, True), (2, 7, True)]
