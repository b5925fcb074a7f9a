"""A sample is one record: its resumption key (model id, config id, prompt id, draw). `orl report a.jsonl a.jsonl`
(a file given twice, or a copy beside its original, or two runs appending one sample to one file) counted every
sample twice: n doubled and a "pass@2" column appeared for a one-draw eval, as if each prompt had two draws."""
import csv

import pytest

from orl.eval.records import read_records
from orl.eval.report import build_report
from orl.eval.runner import EvalSpec, run_eval

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_records_file_given_twice_counts_each_sample_once(tmp_path):
    out = tmp_path / "r.jsonl"
    run_eval(EvalSpec(model="checkpoints/orl-tiny-base", out=str(out), tasks=["split"], limit=3, batch_size=4,
                      progress=False))
    assert len(read_records([out, out])) == 3
    copy = tmp_path / "copy.jsonl"
    copy.write_text(out.read_text())
    assert len(read_records([out, copy])) == 3
    build_report([out, out], tmp_path / "rep")
    with open(tmp_path / "rep" / "overall.csv") as f:
        row = next(csv.DictReader(f))
    assert row["n"] == "3" and row["prompts"] == "3"
    assert "pass@2 %" not in row
