"""Reports group records by model name (the checkpoint directory's name). Two different models with
one name, e.g. the `stage1` of two runs, must stay two rows: before, `orl report` merged them into one
curve and said "nothing to compare"."""
from __future__ import annotations

import pytest
import torch

from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.eval.records import distinct_model_names, read_records
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed: int, where):
    torch.manual_seed(seed)
    tok = CharTokenizer()
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=64, max_seq_len=128))
    return save_checkpoint(model, tok, where)


def rec(name: str, mid: str, path: str) -> dict:
    return {"model": {"name": name, "id": mid, "path": path}, "prompt_id": "add/heldout/0"}


def test_names_are_unchanged_when_unique():
    recs = [rec("base", "1" * 16, "/r/base"), rec("orl", "2" * 16, "/r/orl"), rec("base", "1" * 16, "/r/base")]
    assert distinct_model_names(recs) is recs


def test_the_shortest_telling_path_suffix_then_the_id():
    recs = [rec("stage1", "a" * 16, "/runs/x/tiny7h/stage1"), rec("stage1", "b" * 16, "/runs/y/tiny7c/stage1"),
            rec("stage1", "a" * 16, "/runs/x/tiny7h/stage1")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["tiny7h/stage1", "tiny7c/stage1", "tiny7h/stage1"]
    # one directory, weights rewritten between two evals: the path cannot tell them apart, the id does
    recs = [rec("m", "c" * 16, "/runs/m"), rec("m", "d" * 16, "/runs/m"), rec("z", "e" * 16, "/z")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["m@cccccccc", "m@dddddddd", "z"]
    # same tail two levels up: the suffix grows until it differs
    recs = [rec("s", "f" * 16, "/a/run/s"), rec("s", "0" * 16, "/b/run/s")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["a/run/s", "b/run/s"]
    assert recs[0]["model"]["name"] == "s"  # the caller's records are not modified


def test_a_copy_under_another_name_and_a_cast_stay_apart():
    # `cp -a` keeps the id: the copy named "best" must not take the name of the stage1 it was copied from
    recs = [rec("stage1", "a" * 16, "/runs/x/stage1"), rec("best", "a" * 16, "/ckpt/best"),
            rec("stage1", "b" * 16, "/runs/y/stage1")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["x/stage1", "best", "y/stage1"]
    # --dtype bfloat16 evaluates the same directory as id "<id>-bfloat16": the suffix is what differs
    recs = [rec("stage1", "c" * 16, "/runs/x/stage1"), rec("stage1", "c" * 16 + "-bfloat16", "/runs/x/stage1")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["stage1@cccccccc", "stage1@cccccccc-bfloat16"]
    # two models in one directory and a third elsewhere: short suffixes, @id only where needed
    recs = [rec("s", "1" * 16, "/home/u/runs/x/s"), rec("s", "2" * 16, "/home/u/runs/x/s"), rec("s", "3" * 16, "/home/u/runs/y/s")]
    assert [r["model"]["name"] for r in distinct_model_names(recs)] == ["x/s@11111111", "x/s@22222222", "y/s"]


def test_report_compares_two_runs_stage1(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    for run, seed in (("run-a", 0), ("run-b", 1)):
        d = tiny(seed, tmp_path / run / "stage1")
        assert main(["eval", "--model", str(d), "--tasks", "add", "--limit", "3", "--thresholds", "0.9",
                     "--block-len", "4", "--max-new-tokens", "8", "--no-progress", "--out", str(out)]) == 0
    names = {r["model"]["name"] for r in read_records(out)}
    assert names == {"run-a/stage1", "run-b/stage1"}
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    printed = capsys.readouterr().out
    assert "nothing to compare" not in printed
    assert "run-a/stage1" in printed and "run-b/stage1" in printed
