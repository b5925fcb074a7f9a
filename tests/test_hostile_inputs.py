"""Hostile input at the user-facing surface (CLI output paths, checkpoint configs): what orl did not
write is never shortened or replaced, and a config value of the wrong type or range is a named error at
load, not garbage or a failure deep inside a forward."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from orl.atomic_dir import file_digest
from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.cli import main
from orl.eval.records import read_records
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=48, max_seq_len=128))
    return save_checkpoint(model, TOK, tmp_path_factory.mktemp("ckpt") / "tiny", manifest={"block_len": 4})


def eval_into(ckpt, out) -> int:
    return main(["eval", "--model", str(ckpt), "--tasks", "add", "--limit", "1", "--max-new-tokens", "4",
                 "--batch-size", "1", "--device", "cpu", "--no-progress", "--out", str(out)])


@pytest.fixture(scope="module")
def records(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("rec") / "r.jsonl"
    assert eval_into(ckpt, out) == 0
    return out


# ---------------------------------------------------------------- orl eval --out

@pytest.mark.parametrize("text", ["hello", "line one\nmy last line, no newline after it"])
def test_eval_out_a_file_orl_did_not_write_is_left_whole(ckpt, tmp_path, capsys, text):
    """Before, opening --out cut an unterminated last line (the repair of a killed run's half-written
    record) before anything checked that the file held records: 'hello' became an empty file that the
    run then filled with records (exit 0), and the second file lost its last line."""
    victim = tmp_path / "notes.txt"
    victim.write_text(text)
    assert eval_into(ckpt, victim) == 2
    assert victim.read_text() == text
    err = capsys.readouterr().err
    assert "notes.txt" in err and ("not a record cut short" in err or "notes.txt:1: not a JSON record" in err)


def test_eval_out_records_then_foreign_last_line_is_left_whole(ckpt, records, tmp_path, capsys):
    """A records file someone appended a note to (no final newline): refused as it is."""
    victim = tmp_path / "r.jsonl"
    text = records.read_text() + "note: rerun with seed 2"
    victim.write_text(text)
    assert eval_into(ckpt, victim) == 2
    assert victim.read_text() == text
    assert "the last line is not a record cut short by a kill" in capsys.readouterr().err


def test_eval_out_a_binary_file_is_named(ckpt, tmp_path, capsys):
    victim = tmp_path / "blob.bin"
    victim.write_bytes(b"\xff\xfe\x00garbage")
    assert eval_into(ckpt, victim) == 2
    assert victim.read_bytes() == b"\xff\xfe\x00garbage"
    assert "blob.bin: not a records file (not UTF-8 text" in capsys.readouterr().err


def test_eval_out_a_record_cut_by_a_kill_is_still_repaired(ckpt, records, tmp_path):
    out = tmp_path / "r.jsonl"
    whole = records.read_text()
    out.write_text(whole + whole.splitlines()[0][:7])  # '{"schem': a kill inside the first bytes of a line
    assert eval_into(ckpt, out) == 0
    assert out.read_text() == whole  # the half line dropped, the finished sample not redone


# ---------------------------------------------------------------- orl report --out

def test_report_out_with_files_orl_did_not_write_is_refused(records, tmp_path, capsys):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "summary.csv").write_text("my,own\n1,2\n")
    (d / "report.md").write_text("# my notes\n")
    assert main(["report", str(records), "--out", str(d)]) == 2
    assert "holds summary.csv, report.md, which orl report did not write" in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == ["report.md", "summary.csv"]  # nothing written
    assert (d / "summary.csv").read_text() == "my,own\n1,2\n" and (d / "report.md").read_text() == "# my notes\n"


def test_report_rewrites_its_own_report_and_writes_beside_other_files(records, tmp_path):
    d = tmp_path / "rep"
    d.mkdir()
    (d / "README.txt").write_text("mine")  # another name: kept, not refused
    assert main(["report", str(records), "--out", str(d)]) == 0
    first = (d / "summary.csv").read_text()
    assert main(["report", str(records), "--out", str(d)]) == 0  # an earlier orl report is replaced
    assert (d / "summary.csv").read_text() == first and (d / "README.txt").read_text() == "mine"
    assert len(read_records(records)) == 1


def test_report_out_a_file_is_named(records, tmp_path, capsys):
    f = tmp_path / "out.txt"
    f.write_text("x")
    assert main(["report", str(records), "--out", str(f)]) == 2
    assert "is a file; give the report a directory" in capsys.readouterr().err and f.read_text() == "x"


# ---------------------------------------------------------------- config values of the wrong type or range

def hf_dir(ckpt, tmp_path, **config):
    """The checkpoint as a plain transformers directory (no orl.json), config.json edited."""
    d = tmp_path / "hf"
    shutil.copytree(ckpt, d)
    (d / "orl.json").unlink()
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **config}))
    return d


@pytest.mark.parametrize("config, words", [
    ({"num_hidden_layers": 2.5}, "n_layers must be an integer, got 2.5"),  # before: TypeError naming no file
    ({"num_hidden_layers": True}, "n_layers must be an integer, got True"),  # before: 'n_layers is True'
    ({"num_hidden_layers": "2"}, "n_layers must be an integer, got '2'"),
    ({"rms_norm_eps": "x"}, "norm_eps must be a finite number, got 'x'"),  # before: loaded, TypeError in forward
    ({"rope_theta": -1.0}, "rope_theta must be > 0, got -1.0"),  # before: loaded, decoded NaN garbage
    ({"rope_theta": 0}, "rope_theta must be > 0, got 0"),
    ({"num_attention_heads": 0}, "n_heads must be > 0, got 0"),
])
def test_config_values_are_checked_at_load(ckpt, tmp_path, config, words):
    d = hf_dir(ckpt, tmp_path, **config)
    with pytest.raises(CheckpointError, match=re.escape(f"{d / 'config.json'}: invalid ModelArgs: {words}")):
        load_checkpoint(d)


def test_config_eos_ids_must_be_integers(ckpt, tmp_path):
    """Before: eos_token_id true made token 1 a stop token, 256.9 became 256."""
    for value in (True, 256.9, [1, "2"]):
        d = hf_dir(ckpt, tmp_path / str(value), eos_token_id=value)
        with pytest.raises(CheckpointError, match=re.escape(f"{d / 'config.json'}: token ids must be integers")):
            load_checkpoint(d)


def manifest_edit(ckpt, tmp_path, **fields):
    d = tmp_path / "ck"
    shutil.copytree(ckpt, d)
    m = json.loads((d / "orl.json").read_text())
    (d / "orl.json").write_text(json.dumps({**m, **fields}))
    return d


@pytest.mark.parametrize("fields, words", [
    ({"eos_ids": [1, "x"]}, "bad special token id in the manifest (mask_id / eos_ids): eos_ids must be a list of "
                            "integers, got [1, 'x']"),
    ({"eos_ids": "12"}, "eos_ids must be a list of integers, got '12'"),  # before: EOS ids 1 and 2 (2: the mask)
    ({"eos_ids": [True]}, "eos_ids must be a list of integers, got [True]"),  # before: EOS id 1
    ({"eos_ids": [5.7]}, "eos_ids must be a list of integers, got [5.7]"),  # before: EOS id 5
    ({"mask_id": "2"}, "mask_id must be an integer, got '2'"),  # before: 'outside the model vocabulary'
    ({"format_version": True}, "unsupported format_version True"),  # before: read as version 1
    ({"format_version": 1.0}, "unsupported format_version 1.0"),
    ({"files": ["model.safetensors"]}, "'files' must map file names to checksums, got list"),  # before: not checked
    ({"files": {"../../etc/hostname": "sha256:00"}}, "'files' lists '../../etc/hostname', which is not a plain file "
                                                     "name"),  # before: hashed a file outside the checkpoint
    ({"files": {}}, "its 'files' does not list the weight file(s) ['model.safetensors']"),  # before: read unchecked
    ({"eos_ids": [1, 10**12]}, "EOS id(s) [1000000000000] (eos_ids / eos_token_id) are outside the model vocabulary (99)"),
    ({"model_args": [1]}, "model_args must be an object of ModelArgs fields, got a list"),
])
def test_manifest_values_are_checked_at_load(ckpt, tmp_path, fields, words):
    d = manifest_edit(ckpt, tmp_path, **fields)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        load_checkpoint(d)


def test_an_index_entry_that_is_not_a_name_is_named(ckpt, tmp_path):
    d = manifest_edit(ckpt, tmp_path)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": ["x"]}}))
    with pytest.raises(CheckpointError, match=re.escape("model.safetensors.index.json: entry ['x']")):
        load_checkpoint(d)


# ---------------------------------------------------------------- forged layer counts, under a memory cap

LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a regression is a MemoryError, not the box's OOM
from orl.checkpoint import load_checkpoint
from orl.gguf_import import load_gguf
for path in sys.argv[1:]:
    try:
        (load_gguf if path.endswith(".gguf") else load_checkpoint)(path)
        print("LOADED")
    except Exception as e:
        print(type(e).__name__, str(e).splitlines()[0])
"""


def test_forged_layer_counts_are_refused_before_any_per_layer_allocation(ckpt, tmp_path):
    """Before: n_layers 10**9 in orl.json built set(range(10**9)) in check_sizes (30 GB), a Gemma 3
    config.json with num_hidden_layers 10**9 a list of 10**9 layer types (28 s, 5+ GB, MemoryError),
    and a GGUF's block_count the same."""
    import gguf
    from gguf_tiny import write_tiny_gguf

    qwen = manifest_edit(ckpt, tmp_path, model_args={**json.loads((ckpt / "orl.json").read_text())["model_args"],
                                                      "n_layers": 10**9})
    cfg = json.loads((qwen / "config.json").read_text())
    (qwen / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
    m = json.loads((qwen / "orl.json").read_text())
    (qwen / "orl.json").write_text(json.dumps({**m, "files": {**m["files"], "config.json": file_digest(qwen / "config.json")}}))
    gemma = tmp_path / "gemma"
    gemma.mkdir()
    (gemma / "config.json").write_text(json.dumps(dict(
        model_type="gemma3_text", vocab_size=64, hidden_size=32, num_hidden_layers=10**9, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=48, hidden_activation="gelu_pytorch_tanh")))
    real = gguf.GGUFWriter.add_block_count
    gguf.GGUFWriter.add_block_count = lambda self, n: real(self, 10**9)
    try:
        forged = write_tiny_gguf(tmp_path / "forged.gguf")
    finally:
        gguf.GGUFWriter.add_block_count = real
    out = subprocess.run([sys.executable, "-c", LIMITED, str(qwen), str(gemma), str(forged)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout.splitlines()
    assert out == [
        f"CheckpointError checkpoint {qwen}: the config does not match the weights: n_layers is 1000000000 but "
        "the weights hold 2 layer(s)",
        f"CheckpointError {gemma / 'config.json'}: num_hidden_layers must be an integer in [1, 65536], got 1000000000",
        f"GGUFError {forged}: block_count is 1000000000 but the file holds 6 block(s) of tensors"]


def test_a_forged_expert_count_without_experts_fails_before_the_model_is_built(ckpt, tmp_path, monkeypatch):
    """Before: a dense checkpoint whose orl.json said qwen3_moe with n_experts 10**9 passed check_sizes
    (it compared only layers that hold experts) and Transformer() built 10**9 experts on the meta device
    (still building after 120 s)."""
    import orl.checkpoint as ck

    args = {**json.loads((ckpt / "orl.json").read_text())["model_args"], "n_experts": 10**9, "moe_ffn_dim": 8}
    d = manifest_edit(ckpt, tmp_path, family="qwen3_moe", model_args=args)
    (d / "config.json").unlink()
    monkeypatch.setattr(ck, "Transformer", lambda *a: pytest.fail("built before the sizes were checked"))
    with pytest.raises(CheckpointError, match="n_experts is 1000000000 but the weights hold no expert"):
        load_checkpoint(d)


# ---------------------------------------------------------------- orl serve: a request over the cache budget

def test_a_request_over_the_cache_budget_is_a_400_naming_max_tokens(ckpt, monkeypatch):
    """Before: 400 with param and code null (the engine's CacheBudgetError passed through as a plain
    ValueError). The server keeps serving afterwards."""
    from orl.engine import Engine
    from orl.serve import create_app
    from test_serve import ThreadedServer, counts, get, post

    model, tok, _ = load_checkpoint(ckpt)
    # 27,917 bytes: the state of 2 + 4 tokens (64 slots, block 4) is 19,472 bytes, of 2 + 64 (128 slots) 37,712
    monkeypatch.setenv("ORL_KV_CACHE_GIB", "2.6e-5")
    with ThreadedServer(create_app(Engine(model, tok), "tiny")) as url:
        status, body = post(url, "/v1/completions", {"model": "tiny", "prompt": "ab", "max_tokens": 64})
        assert status == 400 and body["error"]["param"] == "max_tokens"
        assert body["error"]["code"] == "context_length_exceeded" and "ORL_KV_CACHE_GIB" in body["error"]["message"]
        status, body = post(url, "/v1/completions", {"model": "tiny", "prompt": "ab", "max_tokens": 4})
        assert status == 200 and body["usage"]["completion_tokens"] == 4
        counts(url)  # the worker counts a request after its answer is out: wait until it is idle
        health = get(url, "/health")
        assert (health["rejected"], health["failed"], health["completed"]) == (1, 0, 1)  # a 400, not a failure


# ---------------------------------------------------------------- quantize / export over their own source

@pytest.mark.parametrize("argv", [["quantize", "--kind", "int8"], ["export"]])
def test_quantize_and_export_refuse_to_write_over_their_source(ckpt, tmp_path, capsys, argv):
    """Before: `orl quantize --model X --out X` passed check_replaceable (orl wrote X) and replaced the
    full-precision weights with int8 ones; export replaced the checkpoint (and a run's trainer state)."""
    d = tmp_path / "ck"
    shutil.copytree(ckpt, d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    for out in (d, d / "inside"):
        assert main([*argv, "--model", str(d), "--out", str(out)]) == 2
        assert "--model checkpoint" in capsys.readouterr().err
        assert {p.name: p.read_bytes() for p in d.iterdir()} == before


# ---------------------------------------------------------------- orl bench --out

@pytest.mark.parametrize("name, content, words", [
    ("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ", "must be a markdown file (.md)"),
    ("notes.md", b"# notes\n\x00\x01binary", "exists and is not a text file"),
    ("dir.md", None, "is a directory"),
])
def test_bench_out_is_checked_before_the_run_and_never_appended_to_a_non_markdown_file(ckpt, tmp_path, capsys,
                                                                                       name, content, words):
    """Before: the table was appended to any --out (a weight file included) after the whole run, and a
    directory failed only then, losing the run's numbers."""
    out = tmp_path / name
    out.mkdir() if content is None else out.write_bytes(content)
    assert main(["bench", "--base", str(ckpt), "--tasks", "add", "--limit", "1", "--max-new-tokens", "4",
                 "--ar-spec-tokens", "0", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert words in err and "invalid bench settings" in err
    assert out.is_dir() if content is None else out.read_bytes() == content


# ---------------------------------------------------------------- sizes on the command line that never finished

@pytest.mark.parametrize("argv, words", [
    # before: 10**12 forwards for 4 tokens (each chunk unrolls chunk_steps steps, the finished ones no-ops)
    (["generate", "--chunk-steps", str(10**12), "ab"], "chunk_steps must be <= block_len + max_post_steps"),
    # before: 10**12 samples were built before the first generation (never started, memory without bound)
    (["eval", "--tasks", "add", "--limit", str(10**12)], "limit x n_samples must be <= 1,000,000 per task"),
    (["eval", "--tasks", "add", "--limit", "1000", "--n-samples", "1001"], "got 1000 x 1001"),
    (["bench", "--tasks", "add", "--limit", str(10**12)], "limit must be <= 1,000,000 per task"),
])
def test_unbounded_work_from_a_flag_is_refused_before_it_starts(ckpt, tmp_path, capsys, argv, words):
    import signal

    flag = "--base" if argv[0] == "bench" else "--model"
    out = ["--out", str(tmp_path / "r.jsonl"), "--no-progress"] if argv[0] == "eval" else []
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("still running after 60 s"))
    signal.alarm(60)
    try:
        rc = main([argv[0], flag, str(ckpt), "--device", "cpu", "--max-new-tokens", "4", *out, *argv[1:]])
    finally:
        signal.alarm(0)
    assert rc == 2 and words in capsys.readouterr().err


def test_a_tasks_file_that_is_not_utf8_is_named(ckpt, tmp_path, capsys):
    """Before: 'error: 'utf-8' codec can't decode byte 0xff in position 0' with no file named."""
    f = tmp_path / "qa.jsonl"
    f.write_bytes(b'{"prompt": "\xff", "answer": "2"}\n')
    assert main(["eval", "--model", str(ckpt), "--device", "cpu", "--tasks-file", str(f), "--limit", "1",
                 "--out", str(tmp_path / "r.jsonl"), "--no-progress"]) == 2
    assert f"{f}: not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("fields, words", [
    ({"block_len": "4"}, "block_len must be a positive integer or null, got '4'"),
    ({"block_len": 0}, "block_len must be a positive integer or null, got 0"),  # before: silently 16
    ({"residual_mode": "bogus"}, "residual_mode must be one of ('off', 'rcd', 'adapter'), got 'bogus'"),
    ({"layout": "diagonal"}, "layout must be one of ('prompt_block', 'absolute_grid', 'full_sequence')"),
    ({"recipe": [1]}, "recipe must be an object or null, got list"),  # before: AttributeError naming no file
])
def test_manifest_decode_defaults_are_named_with_the_file(ckpt, tmp_path, fields, words):
    """Before: loaded, then generate failed with 'invalid DecodeConfig: ...' as if a flag were wrong."""
    d = manifest_edit(ckpt, tmp_path, **fields)
    with pytest.raises(CheckpointError, match=re.escape(f"{d / 'orl.json'}: {words}")):
        load_checkpoint(d)


@pytest.mark.parametrize("log, words", [(b"garbage\n", "log.jsonl:1: not a JSON line"),
                                        (b"\xff\n", "log.jsonl: not a trainer log (not UTF-8 text"),
                                        (b"5\n", "holds no per-update records")])
def test_report_train_logs_are_read_before_anything_is_written(records, tmp_path, capsys, log, words):
    """Before: 9 files of a report were written, then the log failed (a rerun into that directory
    is refused: no orl report.html there); a non-UTF-8 log was the bare codec message."""
    (tmp_path / "log.jsonl").write_bytes(log)
    out = tmp_path / "rep"
    assert main(["report", str(records), "--out", str(out), "--train-logs", str(tmp_path / "log.jsonl")]) == 2
    assert words in capsys.readouterr().err and not out.exists()


def test_a_report_that_stopped_midway_can_be_rerun_into_its_directory(records, tmp_path, monkeypatch):
    import orl.eval.report as report

    out = tmp_path / "rep"

    def boom(*a, **k):
        raise RuntimeError("killed")

    monkeypatch.setattr(report, "plot_tpf_per_task", boom)
    with pytest.raises(RuntimeError):
        report.build_report([records], out)
    assert (out / "summary.csv").exists() and not (out / "report.html").exists()
    monkeypatch.undo()
    assert report.build_report([records], out) == out / "report.html"
