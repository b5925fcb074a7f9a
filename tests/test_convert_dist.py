"""The convert recipe under torchrun (orl/train/dist.py): two gloo CPU processes give the single-process
run (weights within 1e-5, the same logged losses and gradient norms), the corpus is built by rank 0
alone, and a run resumes with another number of processes - 2 -> 1 through forked ranks, 1 -> 2
through `torchrun --nproc-per-node 2 -m orl.cli train --recipe convert`.

The smoke preset draws 2 code rows and 1 task row per step: rank 1's share of the task micro-batch is
empty, so it runs a zero-weight row there (the case a wrong scale or a missing row shows up in)."""
import json
import os
from dataclasses import replace

import pytest
from safetensors.torch import load_file

import orl.train.convert as cv
from test_convert import base, smoke_cfg  # noqa: F401 (base: the tiny random AR checkpoint fixture)
from test_dist import ATOL, max_diff, records, same_records, torchrun_cli, two_ranks

pytestmark = pytest.mark.usefixtures("one_thread")
FIELDS = ["loss", "grad_norm", "lr", "tokens_seen"]


class Stop(RuntimeError):
    """A crash after step 2's checkpoint (not KeyboardInterrupt: a forked rank exits 0 on that)."""


def quiet(*_) -> None:
    pass


def stop_at_step_2(monkeypatch, only_rank: str | None = None) -> None:
    """make_batches of step 2 (the third step) raises, on every rank or on `only_rank` (the others then
    wait in that step's gradient sync until the parent ends them)."""
    real = cv.make_batches

    def make_batches(c, s, i, step, *a):
        if step == 2 and only_rank in (None, os.environ.get("RANK")):
            raise Stop("after step 2")
        return real(c, s, i, step, *a)

    monkeypatch.setattr(cv, "make_batches", make_batches)


def count_builds(monkeypatch, path) -> None:
    """Each call of build_corpus appends the calling rank to `path`."""
    real = cv.build_corpus

    def build_corpus(*a, **kw):
        with open(path, "a") as f:
            f.write(os.environ.get("RANK", "-") + "\n")
        return real(*a, **kw)

    monkeypatch.setattr(cv, "build_corpus", build_corpus)


def same_run(one, other) -> None:
    assert max_diff(one, other) < ATOL
    same_records(one / "train.log.jsonl", other / "train.log.jsonl", "step", FIELDS)
    assert len(open(other / "train.log.jsonl").readlines()) == 4  # each step logged once (rank 0 alone)
    h1, h2 = (records(d / "train.log.jsonl", "step")[4]["heldout"] for d in (one, other))
    assert h1 == pytest.approx(h2, abs=2e-4)  # rounded to 4 places: one rounding step apart at most


def test_two_processes_match_one_build_the_corpus_once_and_resume_on_one(base, tmp_path, monkeypatch):
    cfg = smoke_cfg(base)
    cv.convert(cfg, tmp_path / "one", log=quiet)
    # a fresh corpus directory (data_dir may change on resume: it is not part of the trajectory)
    two = replace(cfg, data_dir=str(tmp_path / "corpus"))
    count_builds(monkeypatch, tmp_path / "builds")
    stop_at_step_2(monkeypatch, only_rank="0")
    with pytest.raises(Exception, match="after step 2"):
        two_ranks(cv.convert, two, tmp_path / "two", True, False, quiet)
    assert (tmp_path / "builds").read_text() == "0\n"  # rank 1 read what rank 0 built
    a, b = load_file(base / "corpus" / "tokens.safetensors"), load_file(tmp_path / "corpus" / "tokens.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert json.loads((tmp_path / "two" / "orl.json").read_text())["recipe"]["step"] == 2
    monkeypatch.undo()
    cv.convert(two, tmp_path / "two", log=quiet)  # steps 3-4 in one process
    same_run(tmp_path / "one", tmp_path / "two")


def resume_under_torchrun(base, tmp_path, monkeypatch, *sets: str) -> None:
    """Steps 3-4 of a one-process conversion (stopped after step 2) under `torchrun --nproc-per-node 2`
    with extra `--set`s: the same weights, log and trainer state as the uninterrupted one-process run."""
    cfg = smoke_cfg(base)
    cv.convert(cfg, tmp_path / "one", log=quiet)
    stop_at_step_2(monkeypatch)
    with pytest.raises(Stop):
        cv.convert(cfg, tmp_path / "two", log=quiet)
    extra = [arg for s in sets for arg in ("--set", s)]
    out = torchrun_cli("train", "--recipe", "convert", "--preset", "smoke", "--base", cfg.base,
                       "--out", str(tmp_path / "two"), "--set", f"data_dir={cfg.data_dir}",
                       "--set", f"corpus.roots={cfg.corpus.roots[0]}", "--set", "threads=1", *extra)
    assert out.count("resumed from") == 1 and out.count("done: steps 3-4") == 1  # rank 0 alone speaks
    same_run(tmp_path / "one", tmp_path / "two")


def test_torchrun_cli_resumes_a_one_process_run(base, tmp_path, monkeypatch):
    resume_under_torchrun(base, tmp_path, monkeypatch)
