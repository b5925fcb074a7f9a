"""`orl eval`: records content, resumption after an interruption (same records as an uninterrupted
run), repair of a half-written last line, and the CLI end to end (eval then report)."""
from __future__ import annotations

import json

import pytest
import torch

from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.eval import metrics
from orl.eval.records import read_records, record_key
from orl.eval.runner import EvalSpec, run_eval
from orl.eval.tasks import get_task
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    tok = CharTokenizer()
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=64, max_seq_len=256))
    return save_checkpoint(model, tok, tmp_path_factory.mktemp("ckpt") / "tiny")


def spec(ckpt, out, **kw) -> EvalSpec:
    base = dict(model=str(ckpt), out=str(out), tasks=["add", "sort"], limit=3, thresholds=[0.5, 0.9],
                decode={"block_len": 4, "max_new_tokens": 8}, batch_size=2, progress=False)
    return EvalSpec(**{**base, **kw})


def outcome(r: dict) -> tuple:
    """What must not depend on interruptions (timings may)."""
    return record_key(r), tuple(r["output_ids"]), r["verdict"], r["forwards"]["step"], r["forwards"]["commit"]


@pytest.fixture(scope="module")
def full(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "records.jsonl"
    return run_eval(spec(ckpt, out)), out


def test_one_record_per_sample_and_threshold_with_its_provenance(full, ckpt):
    recs, out = full
    assert len(recs) == 2 * 3 * 2 == len(read_records(out))
    assert len({record_key(r) for r in recs}) == len(recs)
    assert {r["decode"]["threshold"] for r in recs} == {0.5, 0.9}
    for r in recs:
        task, split, index = r["prompt_id"].split("/")
        s = get_task(task).sample(split, int(index))
        assert (r["prompt"], r["answer"], split) == (s.prompt, s.answer, "heldout")
        assert r["verdict"] == get_task(task).verify(r["prompt"], r["output_text"])
        assert r["n_tokens"] == len(r["output_ids"]) <= 8
        assert r["tpf"] == metrics.tpf(r["n_tokens"], r["forwards"]["step"], r["forwards"]["commit"])
        assert sum(r["block_steps"]) == r["forwards"]["step"] and r["forwards"]["prefill"] == 1
        assert r["timing"]["total_s"] > 0 and r["timing"]["tokens_per_s"] > 0
        assert r["batch_size"] == 2 and r["decode"]["block_len"] == 4
        assert r["model"]["path"] == str(ckpt) and len(r["model"]["id"]) == 16
        assert "git_commit" in r["code"]


def test_interrupted_run_resumes_to_the_same_records(full, ckpt, tmp_path):
    recs, _ = full
    out = tmp_path / "records.jsonl"
    batches = []

    def crash_after_two(new: list[dict]) -> None:
        batches.append(new)
        if len(batches) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_eval(spec(ckpt, out), on_batch=crash_after_two)
    assert len(read_records(out)) == 4
    # a kill in the middle of writing leaves half a line; it is dropped and redone
    with open(out, "a") as f:
        f.write(json.dumps(recs[-1])[:40])
    with pytest.raises(ValueError):
        json.loads(out.read_text().splitlines()[-1])
    resumed_batches = []
    resumed = run_eval(spec(ckpt, out), on_batch=resumed_batches.append)
    assert sum(len(b) for b in resumed_batches) == len(recs) - 4  # nothing done twice
    assert sorted(map(outcome, resumed)) == sorted(map(outcome, recs))
    lines = out.read_text().splitlines()
    assert len(lines) == len(recs) and all(json.loads(x) for x in lines)
    # a finished run is a no-op
    again = []
    run_eval(spec(ckpt, out), on_batch=again.append)
    assert again == []


def test_other_settings_are_new_records(full, ckpt, tmp_path):
    recs, out = full
    copy = tmp_path / "records.jsonl"
    copy.write_text(out.read_text())
    new = []
    more = run_eval(spec(ckpt, copy, batch_size=3, thresholds=[0.9]), on_batch=new.append)
    assert sum(map(len, new)) == 6 and len(more) == 6 and {r["batch_size"] for r in more} == {3}
    assert len(read_records(copy)) == len(recs) + 6


def test_corrupt_line_in_the_middle_is_an_error(full, tmp_path):
    good = full[1].read_text().splitlines()[0]
    path = tmp_path / "r.jsonl"
    path.write_text(f'{good}\nnot json\n{good}\n')
    with pytest.raises(ValueError, match="r.jsonl:2"):
        read_records(path)


def test_a_line_that_is_no_eval_record_is_named(full, tmp_path):
    """Before: {"schema": 1} alone was read, and `orl report` ended with 'error: model' (a KeyError)."""
    good = full[1].read_text().splitlines()[0]
    path = tmp_path / "r.jsonl"
    path.write_text(f'{good}\n{{"schema": 1, "model": 5}}\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: not an orl eval record: field\(s\) prompt_id, task, sample, "
                                         r"config_id, model, decode"):
        read_records(path)


def test_cli_eval_then_report(ckpt, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    rc = main(["eval", "--model", str(ckpt), "--tasks", "add", "--limit", "2", "--thresholds", "0.5,0.9",
               "--block-len", "4", "--max-new-tokens", "8", "--batch-size", "2", "--no-progress", "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out.splitlines()
    assert "acc %" in table[0] and "steps/block" in table[0]
    # add at 0.5, its pooled row, add at 0.9, its pooled row; then the notes
    assert [ln.split()[3] for ln in table[1:5]] == ["add", "all", "add", "all"]
    assert table[5].startswith("acc % = percent of samples")
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.html").stat().st_size > 10_000
    assert "Headline: nothing to compare" in capsys.readouterr().out  # one model
    assert main(["eval", "--model", str(ckpt), "--tasks", "nope", "--out", str(out), "--no-progress"]) == 2


def test_heldout_eval_tpf_is_a_ratio_of_sums():
    from orl.engine.sequence import Generation
    from orl.train.heldout import heldout_eval

    class Canned:  # an engine whose answers have different lengths and forward counts
        model = torch.nn.Linear(1, 1)

        def generate(self, prompts, cfg):
            shapes = [(4, 1, 0), (12, 5, 1)]  # (tokens, denoising, commit): TPF 4 and 2; mean 3, ratio of sums 16 / 7
            return [Generation([], [0] * t, "", True, 1, s, c, 0.0, 1.0, [1] * (c + 1)) for t, s, c in shapes]

    res = heldout_eval(Canned(), ("add",), cfg=None, n=2)["add"]
    assert res["tpf"] == round(16 / 7, 2) == 2.29


def test_default_tasks_are_the_ones_the_checkpoint_trained_on(tmp_path):
    """`orl eval` without --tasks scored a tasks-v7 model on the v6 families (0% everywhere, no word of why): the
    default is now the families its manifest records ("trained"); "all" still names the v6 suite."""
    from pathlib import Path

    from orl.eval.runner import _tasks
    from orl.eval.tasks import task_names

    ck = Path(__file__).resolve().parents[1] / "checkpoints"
    manifest = json.loads((ck / "orl-tiny7-base" / "orl.json").read_text())
    tok = CharTokenizer()
    assert EvalSpec(model="m", out="o").tasks == ["trained"]
    assert list(_tasks(EvalSpec(model="m", out="o"), tok, manifest)) == [
        "long7xp", "prog7xp", "split7xp", "constr7xp", "keysort7x"]  # its helper families are training only
    assert list(_tasks(EvalSpec(model="m", out="o", tasks=["all"]), tok, manifest)) == task_names()
    assert list(_tasks(EvalSpec(model="m", out="o"), tok, {})) == task_names()  # nothing recorded: the suite
    out = tmp_path / "r.jsonl"
    assert main(["eval", "--model", str(ck / "orl-tiny7-base"), "--limit", "1", "--no-progress", "--out", str(out)]) == 0
    assert {r["task"] for r in read_records(out)} == {"long7xp", "prog7xp", "split7xp", "constr7xp", "keysort7x"}


def test_out_that_is_not_a_regular_file_is_named(tmp_path):
    """--out /dev/null failed as "Invalid argument", naming nothing (review, session 48)."""
    from orl.eval.records import check_out

    for bad in ("/dev/null", str(tmp_path)):
        with pytest.raises(ValueError, match="not a regular file"):
            check_out(bad)
    check_out(tmp_path / "new.jsonl")  # a file that does not exist yet is what --out usually names
