"""benchmarks/length_table.py --paired (the McNemar of every headline comparison) tests only the samples both
models answered. Samples that only one model has (a run stopped early, another --limit or seed) were dropped
without a word: the table's n gave no hint that A's accuracy elsewhere rested on more prompts than the test saw.
The headline (orl report) says how many it leaves out; --paired now says it too."""
import importlib.util
import sys
from pathlib import Path

from orl.eval.records import RecordWriter

ROOT = Path(__file__).resolve().parent.parent


def length_table():
    spec = importlib.util.spec_from_file_location("length_table", ROOT / "benchmarks" / "length_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rec(model: str, i: int, ok: bool, seed: int = 0) -> dict:
    d = {"rule": "ar", "block_len": 1, "residual": "off", "threshold": None, "seed": seed}
    return {"prompt_id": f"long7/beyond/{seed * 2 ** 32 + i}", "task": "long7", "split": "beyond", "sample": 0,
            "prompt": f"p{i}", "verdict": ok, "n_tokens": 4, "finished": True,
            "forwards": {"prefill": 1, "step": 4, "commit": 0}, "block_steps": [],
            "timing": {"tokens_per_s": 1.0, "total_s": 4.0}, "batch_size": 1, "decode": d, "config_id": "c",
            "model": {"name": model, "id": model}}


def test_paired_says_how_many_samples_of_each_side_it_leaves_out(tmp_path, monkeypatch, capsys):
    # A: prompts 0-4 of seed 0 and prompt 0 of seed 1; B: prompts 0-2 of seed 0. Paired: 3 (A right on all,
    # B on none: b = 3, c = 0, p = 2 / 2^3 = 0.25); A's prompts 3, 4 and its seed-1 prompt have no partner
    recs = [rec("A", i, True) for i in range(5)] + [rec("A", 0, True, seed=1)] + [rec("B", i, False) for i in range(3)]
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(recs)
    lt = length_table()
    assert [row[2:] for row in lt.paired(recs, "A", "B")][-1] == (3, 3, 0, 3, 0, 0.25)  # the "all" row
    monkeypatch.setattr(sys, "argv", ["length_table.py", str(path), "--paired", "A", "B"])
    lt.main()
    out = capsys.readouterr().out
    assert "3 samples of A and 0 of B" in out and "left out" in out


def test_nothing_is_said_when_every_sample_is_paired(tmp_path, monkeypatch, capsys):
    recs = [rec("A", i, True) for i in range(3)] + [rec("B", i, False) for i in range(3)]
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(recs)
    lt = length_table()
    monkeypatch.setattr(sys, "argv", ["length_table.py", str(path), "--paired", "A", "B"])
    lt.main()
    assert "left out" not in capsys.readouterr().out
