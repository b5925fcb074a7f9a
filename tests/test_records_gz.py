"""read_records on gzip-compressed records (the form committed under docs/): the same records as the plain
file, and a cut or foreign .gz named as such."""
from __future__ import annotations

import gzip
import json

import pytest

from orl.eval.records import read_records
from test_select import rec


def test_a_gz_file_reads_as_its_plain_text(tmp_path):
    recs = [rec("m", "long7xp", "beyond", i, i % 2 == 0) for i in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in recs)
    (tmp_path / "r.jsonl").write_text(text)
    (tmp_path / "r.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    plain, packed = read_records(tmp_path / "r.jsonl"), read_records(tmp_path / "r.jsonl.gz")
    assert packed == plain and [r["verdict"] for r in packed] == [True, False, True, False, True]
    # a kill mid-write inside the compressed text: the unterminated last line is skipped there too
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(text[:-20].encode()))
    assert read_records(tmp_path / "cut.jsonl.gz") == plain[:4]


@pytest.mark.parametrize("payload", [b"plain text, not gzip\n", b"cut", b""])
def test_a_gz_that_is_not_gzip_is_cut_or_is_empty_is_named(tmp_path, payload):
    if payload == b"cut":
        payload = gzip.compress(json.dumps(rec("m", "t", "s", 0, True)).encode() * 50)[:-30]
    (tmp_path / "r.jsonl.gz").write_bytes(payload)
    with pytest.raises(ValueError, match=r"r\.jsonl\.gz: not a gzip-compressed records file"):
        read_records(tmp_path / "r.jsonl.gz")


def test_an_upper_case_gz_is_read_and_a_plain_file_error_is_not_called_gzip(tmp_path):
    line = json.dumps(rec("m", "t", "s", 0, True)) + "\n"
    (tmp_path / "R.JSONL.GZ").write_bytes(gzip.compress(line.encode()))
    assert [r["verdict"] for r in read_records(tmp_path / "R.JSONL.GZ")] == [True]
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(OSError):  # the OS's own error (a directory), not a gzip complaint
        read_records(tmp_path / "d.jsonl")


def test_a_gz_out_is_refused_before_anything_is_written(tmp_path):
    from orl.eval.records import RecordWriter
    packed = gzip.compress((json.dumps(rec("m", "t", "s", 0, True)) + "\n").encode())
    (tmp_path / "r.jsonl.gz").write_bytes(packed)
    for name in ("r.jsonl.gz", "new.jsonl.gz", "NEW.JSONL.GZ"):
        with pytest.raises(ValueError, match="plain JSONL and reads .gz only"):
            RecordWriter(tmp_path / name)
    assert (tmp_path / "r.jsonl.gz").read_bytes() == packed and not (tmp_path / "new.jsonl.gz").exists()


def test_orl_eval_refuses_a_gz_out_before_it_loads_the_model(tmp_path, capsys):
    from orl.cli import main
    # no checkpoint exists at --model: the .gz out is named first, the model never read
    assert main(["eval", "--model", str(tmp_path / "missing"), "--tasks", "add", "--limit", "1",
                 "--out", str(tmp_path / "r.jsonl.gz")]) != 0
    err = capsys.readouterr().err
    assert "plain JSONL and reads .gz only" in err and "missing" not in err.replace(str(tmp_path / "r.jsonl.gz"), "")
