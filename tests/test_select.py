"""Checkpoint selection on validation records (orl/eval/select.py, benchmarks/select_checkpoint.py): the
choice by mean family accuracy on one split, ties to the later checkpoint, the in-range floor, validation
prompts that are also test prompts left out, and the errors a mismatched set of records gets."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orl.eval.select import select

ROOT = Path(__file__).resolve().parents[1]


def rec(model: str, task: str, split: str, i: int, ok: bool, seed: int = 100, prompt: str | None = None) -> dict:
    """A record as read_records accepts it; prompt seed `seed` puts it at index seed * 2**32 + i."""
    index = seed * 2 ** 32 + i
    return {"schema": 1, "prompt_id": f"{task}/{split}/{index}", "task": task, "split": split, "index": index,
            "sample": 0, "prompt": prompt or f"{task}:{split}:{index}", "verdict": ok, "config_id": "c",
            "model": {"name": model, "id": model}, "n_tokens": 4, "forwards": {"prefill": 1, "step": 4, "commit": 0},
            "timing": {}, "block_steps": [], "batch_size": 1,
            "decode": {"rule": "ar", "residual": "off", "seed": seed, "threshold": None}}


def family(model: str, task: str, split: str, right: int, n: int = 10, seed: int = 100) -> list[dict]:
    """n prompts of one family, the first `right` of them answered right."""
    return [rec(model, task, split, i, i < right, seed) for i in range(n)]


def run(model: str, long_in: int, prog_in: int, long_out: int, prog_out: int, seed: int = 100) -> list[dict]:
    return (family(model, "long7xp", "heldout", long_in, seed=seed) + family(model, "prog7xp", "heldout", prog_in, seed=seed)
            + family(model, "long7xp", "beyond", long_out, seed=seed) + family(model, "prog7xp", "beyond", prog_out, seed=seed))


def test_the_best_mean_beyond_wins_and_a_tie_goes_to_the_later_checkpoint():
    val = run("a", 10, 10, 5, 0) + run("b", 10, 10, 4, 2) + run("c", 10, 10, 6, 0)
    sel = select(val, ["a", "b", "c"])
    assert [c.mean("beyond") for c in sel.candidates] == pytest.approx([0.25, 0.30, 0.30])
    assert sel.chosen == "c" and sel.floor_met and sel.left_out == 0  # b and c tie at 0.30: the later one
    assert select(val, ["a", "b"]).chosen == "b"
    assert select(val, ["c", "b"]).chosen == "b"                      # order is training order, not names
    assert select(val, ["a", "b", "c"], split="heldout").chosen == "c"  # all at 1.0: the final one
    # the mean is over families, not over prompts: 20 right of 40 in one family beats 11 + 0 of 10 + 10
    skewed = run("d", 10, 10, 6, 0) + family("e", "long7xp", "heldout", 10) + family("e", "prog7xp", "heldout", 10)
    skewed += [rec("e", "long7xp", "beyond", i, i < 10) for i in range(10)] + family("e", "prog7xp", "beyond", 0)
    assert select(skewed, ["e", "d"]).candidates[0].mean("beyond") == pytest.approx(0.5)


def test_the_in_range_floor_and_a_run_where_no_checkpoint_reaches_it():
    val = run("early", 9, 6, 7, 3) + run("late", 10, 10, 5, 1)
    assert select(val, ["early", "late"]).chosen == "early"
    assert select(val, ["early", "late"], min_in_range=0.8).chosen == "late"   # early's in-range mean is 0.75
    assert select(val, ["early", "late"], min_in_range=0.75).chosen == "early"  # exactly at the floor counts
    assert select(run("p", 9, 7, 7, 3) + run("q", 10, 10, 5, 1), ["p", "q"], min_in_range=0.8).chosen == "p"  # 4/5, not float 0.8
    sel = select(val, ["early", "late"], min_in_range=1.0 + 0.0)
    assert sel.chosen == "late" and sel.floor_met
    low = run("x", 5, 5, 9, 9) + run("y", 6, 5, 1, 1)
    sel = select(low, ["x", "y"], min_in_range=0.9)
    assert sel.chosen == "y" and not sel.floor_met                            # none reaches it: the final is kept


def test_validation_prompts_that_are_test_prompts_are_left_out():
    val = run("a", 10, 10, 5, 0) + run("b", 10, 10, 4, 0)
    # test prompts with the same text as a's and b's first two long7xp beyond prompts (right in a and b)
    test = [rec("a", "long7xp", "beyond", i, True, seed=0, prompt=f"long7xp:beyond:{100 * 2 ** 32 + i}") for i in range(2)]
    sel = select(val, ["a", "b"], test)
    assert sel.left_out == 2
    assert [c.acc["beyond"]["long7xp"] for c in sel.candidates] == pytest.approx([3 / 8, 2 / 8])
    assert sel.candidates[0].n == 38
    # the same text on another split or family is another prompt
    other = [rec("a", "prog7xp", "beyond", 0, True, seed=0, prompt=f"long7xp:beyond:{100 * 2 ** 32}")]
    assert select(val, ["a", "b"], other).left_out == 0


def test_mismatched_records_are_refused_with_a_reason():
    val = run("a", 10, 10, 5, 0) + run("b", 10, 10, 4, 0)
    with pytest.raises(ValueError, match="no validation records of 'z'.*a, b"):
        select(val, ["a", "z"])
    with pytest.raises(ValueError, match="different prompts"):
        select(val + [rec("b", "long7xp", "beyond", 99, True)], ["a", "b"])
    with pytest.raises(ValueError, match="named twice"):
        select(val, ["a", "a"])
    with pytest.raises(ValueError, match="at least one"):
        select(val, [])
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\]"):
        select(val, ["a"], min_in_range=90)
    with pytest.raises(ValueError, match="split 'beyond'"):
        select([r for r in val if r["split"] == "heldout"], ["a", "b"])
    with pytest.raises(ValueError, match="split 'heldout'"):
        select([r for r in val if r["split"] == "beyond"], ["a", "b"], min_in_range=0.5)
    # a prompt evaluated twice counts with its last record, so a re-evaluation does not double it
    again = select(val + [rec("a", "long7xp", "beyond", 9, True)], ["a", "b"])
    assert again.candidates[0].acc["beyond"]["long7xp"] == pytest.approx(0.6) and again.candidates[0].n == 40


def write(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_the_script_chooses_on_validation_and_pairs_chosen_with_final_on_test(tmp_path):
    val = write(tmp_path / "val.jsonl", run("r-at5000", 10, 10, 6, 4) + run("r", 10, 10, 6, 1))
    # on test the chosen checkpoint gets 5 prog7xp beyond prompts the final one misses, and loses none
    test = write(tmp_path / "test.jsonl", run("r-at5000", 10, 10, 5, 6, seed=0) + run("r", 10, 10, 5, 1, seed=0))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "select_checkpoint.py"), "--val", val, "--test", test,
                          "--run", "s0=r-at5000,r"], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert any(line.split()[0] == "r-at5000" and line.endswith("<- chosen") for line in lines)
    (prog,) = [line.split() for line in lines if line.split()[:2] == ["beyond", "prog7xp"]]
    assert prog[2:] == ["10", "60.0", "10.0", "5", "0", "0.062"]           # 2 * (1/2)^5
    (mean,) = [line.split() for line in lines if line.startswith("  mean")]
    assert mean[1:] == ["55.0", "30.0", "100.0", "100.0"]                    # beyond, then heldout
    # the chosen checkpoint has no test records: said, not a traceback
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "select_checkpoint.py"), "--val", val,
                          "--test", write(tmp_path / "t2.jsonl", run("r", 10, 10, 5, 1, seed=0)), "--run", "s0=r-at5000,r"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no test records of 'r-at5000'" in bad.stderr
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "select_checkpoint.py"), "--val", val,
                          "--test", test, "--run", "s0"], capture_output=True, text=True)
    assert bad.returncode != 0 and "LABEL=CKPT" in bad.stderr


def test_kept_lists_a_runs_copies_by_step_with_its_objective_and_names_only_prints_the_choice(tmp_path):
    for name, objective in (("r", "block_diffusion"), ("r-at2", "autoregressive"), ("r-at4", "block_diffusion"),
                            ("r-at10", "block_diffusion"), ("r-atx", "block_diffusion"), ("rr-at4", "block_diffusion"),
                            ("r-at12", "block_diffusion")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "orl.json").write_text(json.dumps({"objective": objective, "recipe": {"step": 12}}))
    # r-at12 is at the final checkpoint's own step (left by an attempt with more steps): not a candidate
    # r-at2 is the AR stage of a block-diffusion run: not a candidate; r-at10 sorts after r-at4 by step
    val = write(tmp_path / "val.jsonl", run("r-at4", 10, 10, 2, 2) + run("r-at10", 10, 10, 6, 4) + run("r", 10, 10, 6, 1)
                + run("r-at2", 10, 10, 9, 9))
    script = [sys.executable, str(ROOT / "benchmarks" / "select_checkpoint.py"), "--val", val]
    out = subprocess.run(script + ["--kept", str(tmp_path / "r"), "--names-only"], capture_output=True, text=True, check=True)
    assert out.stdout == "r r-at10\n"
    table = subprocess.run(script + ["--kept", str(tmp_path / "r")], capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in table.splitlines()[2:5]] == ["r-at4", "r-at10", "r"]
    late = subprocess.run(script + ["--kept", str(tmp_path / "r"), "--from-step", "5"], capture_output=True, text=True,
                          check=True).stdout
    assert [line.split()[0] for line in late.splitlines()[2:4]] == ["r-at10", "r"] and "r-at4" not in late
    # chosen == final: said in a line, no paired table of a checkpoint against itself
    test = write(tmp_path / "test.jsonl", run("r", 10, 10, 5, 1, seed=0))
    same = subprocess.run(script + ["--run", "s=r-at4,r", "--test", test], capture_output=True, text=True, check=True).stdout
    assert "the final checkpoint r is chosen" in same and "only ch." not in same
    missing = subprocess.run(script + ["--kept", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode != 0 and "not a checkpoint directory" in missing.stderr


def test_records_of_two_decoders_or_two_models_under_one_name_are_refused_not_mixed():
    val = run("a", 10, 10, 5, 0) + run("b", 10, 10, 4, 0)
    other = [{**r, "decode": {**r["decode"], "threshold": 0.5, "rule": "threshold", "block_len": 16}}
             for r in run("a", 10, 10, 0, 0)]
    with pytest.raises(ValueError, match="'a' has records of 2 decoders"):
        select(val + other, ["a", "b"])  # file order would otherwise decide which verdict counts
    b_other = [{**r, "decode": {**r["decode"], "max_new_tokens": 64}} for r in run("b", 10, 10, 4, 0)]
    with pytest.raises(ValueError, match="validated with different decoders"):
        select(run("a", 10, 10, 5, 0) + b_other, ["a", "b"])
    twin = [{**r, "model": {"name": "a", "id": "a2"}} for r in run("a", 10, 10, 9, 9, seed=101)]
    with pytest.raises(ValueError, match="'a' names 2 different models"):
        select(val + twin, ["a", "b"])
    # every validation prompt is also a test prompt: an error, not a silent choice of the final one
    with pytest.raises(ValueError, match="nothing left to score on split 'beyond'"):
        select(val, ["a", "b"], test=val)


def test_the_summary_pairs_chosen_and_final_on_the_prompts_both_answered(tmp_path):
    val = write(tmp_path / "val.jsonl", run("r-at5000", 10, 10, 6, 4) + run("r", 10, 10, 6, 1))
    # the final checkpoint also has 10 wrong answers to prompts the chosen one was not asked: not counted
    extra = [rec("r", "prog7xp", "beyond", 100 + i, False, seed=0) for i in range(10)]
    test = write(tmp_path / "test.jsonl", run("r-at5000", 10, 10, 5, 6, seed=0) + run("r", 10, 10, 5, 1, seed=0) + extra)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "select_checkpoint.py"), "--val", val, "--test", test,
                          "--run", "s0=r-at5000,r"], capture_output=True, text=True, check=True).stdout
    (mean,) = [line.split() for line in out.splitlines() if line.startswith("  mean")]
    assert mean[1:] == ["55.0", "30.0", "100.0", "100.0"]
