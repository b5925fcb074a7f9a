"""benchmarks/text_table.py: accuracy per family pooled over seed files, TPF as a ratio of sums, the paired McNemar
against the baseline at its threshold, a re-evaluated prompt counted once, and a file of two models refused."""
from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("text_table", ROOT / "benchmarks" / "text_table.py")
tab = importlib.util.module_from_spec(spec)
sys.modules.setdefault("text_table", tab)
spec.loader.exec_module(tab)


def rec(model, task, i, verdict, tau=0.9, n_tokens=4, steps=4, model_id=None):
    decode = {"rule": "threshold", "threshold": tau, "block_len": 4, "residual": "off", "seed": 0, "temperature": 0.0}
    return {"schema": 1, "config_id": f"c{tau}", "timing": {}, "batch_size": 8,
            "model": {"name": model, "id": model_id or model}, "decode": decode, "task": task, "split": "heldout",
            "prompt_id": f"{task}/heldout/{i}", "prompt": f"{task} q{i} =", "sample": 0, "verdict": verdict,
            "n_tokens": n_tokens, "finished": True, "stop": "\n", "forwards": {"prefill": 1, "step": steps, "commit": 0},
            "block_steps": [steps]}


def write(path, recs, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in recs)
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def test_table_pairs_and_pools(tmp_path, capsys):
    # seed 0: base right on copy 0-3, new right on copy 0-1 and 4-9, then copy 2 on a second try; seed 1 (gzipped): both right on copy 0
    write(tmp_path / "base-seed0.jsonl", [rec("base", "copy", i, i < 4) for i in range(10)])
    write(tmp_path / "new-seed0.jsonl", [rec("new", "copy", i, i < 2 or i >= 4, n_tokens=8) for i in range(10)]
          + [rec("new", "copy", 2, True, n_tokens=8)])  # copy 2 evaluated again: the last record counts
    write(tmp_path / "base-seed1.jsonl", [rec("base", "copy", 0, True)], gz=True)
    write(tmp_path / "new-seed1.jsonl", [rec("new", "copy", 0, True, n_tokens=8)], gz=True)
    assert tab.main([str(tmp_path), "--models", "base,new", "--baseline", "base", "--seeds", "0,1", "--kinds", "seed"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| base") or line.startswith("| new")]
    base, new = (r.split(" | ") for r in rows)
    assert base[3] == "45.5" and new[3] == "90.9"   # 5 of 11 and 10 of 11 (the re-evaluated prompt once, right)
    assert new[8] == "2.00" and base[8] == "1.00"   # tokens / forwards, summed
    # right only in new: copy 4-9 (6); only in base: copy 3 (1); p = 2 * P(X <= 1 | 7, 1/2) = 16 / 128
    assert new[-1].startswith("at 0.9: +45.5 pts, 6 vs 1, p = 0.12 (n = 11)")


def test_two_models_in_one_file_are_refused(tmp_path):
    write(tmp_path / "m-seed0.jsonl", [rec("m", "copy", 0, True), rec("m", "copy", 1, True, model_id="other")])
    with pytest.raises(SystemExit, match="2 models"):
        tab.main([str(tmp_path), "--models", "m", "--seeds", "0", "--kinds", "seed"])
    write(tmp_path / "x-seed0.jsonl", [rec("x", "sort", 0, True)])
    with pytest.raises(SystemExit, match="not one of"):
        tab.main([str(tmp_path), "--models", "x", "--seeds", "0", "--kinds", "seed"])


def aup_rows(out):
    return {line.split(" | ")[0][2:]: line.split(" | ") for line in out.splitlines()
            if line.count("|") == 8 and "AUP" not in line and "---" not in line}


def test_aup_over_full_seed_thresholds(tmp_path, capsys):
    # a: both seeds at 0.9 (TPF 1, 2 of 4 right) and 0.7 (TPF 2, 2 of 4 right); b: 0.7 on both seeds (TPF 1; seed 0
    # 2 of 4, seed 1 none), 0.9 on seed 0 only -> left out of b's curve; c: AR only -> no curve
    for s in (0, 1):
        write(tmp_path / f"a-seed{s}.jsonl", [rec("a", "copy", i, i < 2) for i in range(4)]
              + [rec("a", "copy", i, i < 2, tau=0.7, n_tokens=8) for i in range(4)])
        write(tmp_path / f"b-seed{s}.jsonl", [rec("b", "copy", i, s == 0 and i < 2, tau=0.7) for i in range(4)]
              + ([rec("b", "copy", i, True) for i in range(4)] if s == 0 else []))
        ar = [rec("c", "copy", i, True) for i in range(4)]
        for r in ar:
            r["decode"]["rule"] = "ar"
        write(tmp_path / f"c-seed{s}.jsonl", ar)
    assert tab.main([str(tmp_path), "--models", "a,b,c", "--seeds", "0,1", "--kinds", "seed", "--aup"]) == 0
    rows = aup_rows(capsys.readouterr().out)
    # y_max = 50 (a's points; b's 0.9 point is left out, c's AR answers set nothing): a = 1 * 50 + (2 - 1) * (50 + 50) / 2
    assert rows["a"][2:5] == ["0.7,0.9", "0.7,0.9", "**100.0** (100.0-100.0)"]
    # b: one point, TPF 1 at 25% (seeds: 50% and 0%) -> the rectangle 1 * 25
    assert rows["b"][2:5] == ["0.7", "0.7", "**25.0** (0.0-50.0)"] and rows["b"][6] == "0.9 |"
    assert rows["c"][4] == "no threshold curve"


def test_aup_drop_rule_and_partial_seeds(tmp_path, capsys):
    # a: 0.9 at TPF 1 with 10 of 10 right, 0.5 at TPF 2 with 9 of 10 (10 points lower: dropped by the 5-point rule),
    # 0.7 answered on 9 of the 10 questions only (an interrupted run): left out
    write(tmp_path / "a-seed0.jsonl", [rec("a", "copy", i, True) for i in range(10)]
          + [rec("a", "copy", i, i > 0, tau=0.5, n_tokens=8) for i in range(10)]
          + [rec("a", "copy", i, True, tau=0.7, n_tokens=6) for i in range(9)])
    assert tab.main([str(tmp_path), "--models", "a", "--seeds", "0", "--kinds", "seed", "--aup"]) == 0
    a = aup_rows(capsys.readouterr().out)["a"]
    assert a[2:5] == ["0.5,0.9", "0.9", "**100.0** (100.0-100.0)"] and a[6] == "0.7 |"


def test_records_are_found_in_the_first_dir_that_has_them(tmp_path, capsys):
    (tmp_path / "new").mkdir(), (tmp_path / "old").mkdir()
    write(tmp_path / "old" / "a-seed0.jsonl", [rec("a", "copy", 0, False)], gz=True)
    write(tmp_path / "new" / "a-seed0.jsonl", [rec("a", "copy", 0, True)], gz=True)
    write(tmp_path / "old" / "b-seed0.jsonl", [rec("b", "copy", 0, True)], gz=True)
    assert tab.main([str(tmp_path / "new"), str(tmp_path / "old"), "--models", "a,b", "--seeds", "0", "--kinds", "seed"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line[:4] in ("| a ", "| b ")]
    assert [r[3] for r in rows] == ["100.0", "100.0"]   # a from new (not old's wrong answer), b from old
    with pytest.raises(SystemExit, match="no records c-seed0.jsonl"):
        tab.main([str(tmp_path / "new"), "--models", "c", "--seeds", "0", "--kinds", "seed"])
