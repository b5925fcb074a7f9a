"""The convert recipe under torchrun (orl/train/dist.py): two gloo CPU processes give the single-process
run (weights within 1e-5, the same logged losses and gradient norms), the corpus is built by rank 0
alone, and a run resumes with another number of processes - 2 -> 1 through forked ranks, 1 -> 2
through `torchrun --nproc-per-node 2 -m orl.cli train --recipe convert`.

The smoke preset draws 2 code rows and 1 task row per step: rank 1's share of the task micro-batch is
empty, so it runs a zero-weight row there (the case a wrong scale or a missing row shows up in)."""
import errno
import json
import os
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from safetensors.torch import load_file

import orl.checkpoint
import orl.train.convert as cv
import orl.train.dist as dist_mod
from orl.train.corpus import CorpusMissing
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
    d1, d2 = h1.pop("drafts"), h2.pop("drafts")  # argmax counts: equal unless a near-tie flips between the runs
    assert d1["cuts"] == d2["cuts"] and d1["accepted"] == pytest.approx(d2["accepted"], abs=0.1)
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


# ---- a rank that fails alone -------------------------------------------------------------------------
# Each rank records how it stopped, then stays until every rank has, as a process on another node does
# (nccl does not notice a peer that has gone; gloo would notice an exit here): without the agreement
# in Dist.on_every / on_main the others would wait in their next collective for the process group's
# timeout, here WAIT seconds instead of 2 hours.

WAIT = 30  # far above a run's few seconds


def _stops(cfg, out_of, result_dir):
    rank = os.environ["RANK"]
    t0 = time.perf_counter()
    try:
        cv.convert(cfg, out_of(rank), log=quiet)
        outcome = "ran"
    except Exception as e:  # noqa: BLE001 - each rank records how it stopped
        outcome = f"{type(e).__name__}: {e}"
    (result_dir / f"rank{rank}.tmp").write_text(json.dumps([time.time(), outcome]))
    (result_dir / f"rank{rank}.tmp").replace(result_dir / f"rank{rank}")
    while not all((result_dir / f"rank{r}").exists() for r in (0, 1)) and time.perf_counter() - t0 < WAIT + 10:
        time.sleep(0.1)


def run_two(monkeypatch, cfg, out_of, tmp_path):
    """[(when it stopped, outcome)] of ranks 0 and 1 (time.time())."""
    monkeypatch.setattr(dist_mod, "TIMEOUT", timedelta(seconds=WAIT))
    two_ranks(_stops, cfg, out_of, tmp_path)
    return [json.loads((tmp_path / f"rank{r}").read_text()) for r in (0, 1)]


def fail_on(monkeypatch, module, name, rank, error, result_dir):
    """module.name raises `error` on `rank`, first writing the time it failed to result_dir/failed_at."""
    real = getattr(module, name)

    def fn(*a, **kw):
        if os.environ.get("RANK") == rank:
            (result_dir / "failed_at").write_text(str(time.time()))
            raise error
        return real(*a, **kw)

    monkeypatch.setattr(module, name, fn)


@pytest.mark.parametrize("name,error", [("read_corpus", CorpusMissing("no finished corpus on rank 1's node")),
                                        ("load_base", FileNotFoundError("no base on rank 1's node"))])
def test_a_rank_that_cannot_read_the_base_or_corpus_stops_every_rank(base, tmp_path, monkeypatch, name, error):
    fail_on(monkeypatch, cv, name, "1", error, tmp_path)
    (t0, rank0), (_, rank1) = run_two(monkeypatch, smoke_cfg(base), lambda rank: tmp_path / "run", tmp_path)
    assert rank1 == f"{type(error).__name__}: {error}"  # the failing rank raises its own error
    assert rank0.startswith(f"RankFailed: rank 1 failed: {type(error).__name__}: {error}")
    assert t0 - float((tmp_path / "failed_at").read_text()) < WAIT / 2  # told at once, not after the timeout


def test_rank_0_failing_to_build_the_corpus_tells_the_others_why(base, tmp_path, monkeypatch):
    fail_on(monkeypatch, cv, "build_corpus", "0", OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    cfg = replace(smoke_cfg(base), data_dir=str(tmp_path / "corpus"))
    (_, rank0), (t1, rank1) = run_two(monkeypatch, cfg, lambda rank: tmp_path / "run", tmp_path)
    assert rank0.startswith("OSError") and t1 - float((tmp_path / "failed_at").read_text()) < WAIT / 2
    assert rank1.startswith("RankFailed: rank 0 failed: OSError: [Errno 28] No space left on device")


def test_rank_0_failing_to_write_a_checkpoint_stops_the_others_at_once(base, tmp_path, monkeypatch):
    """The write of step 2 fails on rank 0 (a full disk): rank 1 stops there, not in step 3's gradient
    sync after the timeout; the run's directory is as before (nothing was written)."""
    fail_on(monkeypatch, orl.checkpoint, "save_checkpoint", "0", OSError(errno.ENOSPC, "No space left on device"),
            tmp_path)
    (_, rank0), (t1, rank1) = run_two(monkeypatch, smoke_cfg(base), lambda rank: tmp_path / "run", tmp_path)
    assert rank0.startswith("OSError") and t1 - float((tmp_path / "failed_at").read_text()) < WAIT / 2
    assert rank1.startswith("RankFailed: rank 0 failed: OSError: [Errno 28]")
    assert not (tmp_path / "run" / "orl.json").exists()


def test_ranks_that_find_the_run_at_different_steps_refuse_to_start(base, tmp_path, monkeypatch):
    """--out on each node's own disk: rank 0 sees the run at step 2, rank 1 an empty directory. Trained
    on, rank 0 would run steps 3-4 and rank 1 steps 1-4, DDP averaging gradients of unrelated batches
    into a checkpoint labelled with rank 0's step."""
    cfg = smoke_cfg(base)
    stop_at_step_2(monkeypatch)
    with pytest.raises(Stop):
        cv.convert(cfg, tmp_path / "node0" / "run", log=quiet)
    monkeypatch.undo()
    (tmp_path / "node1" / "run").mkdir(parents=True)
    outcomes = run_two(monkeypatch, cfg, lambda rank: tmp_path / f"node{rank}" / "run", tmp_path)
    for _, outcome in outcomes:
        assert outcome.startswith("ResumeError")
        assert "(rank 0: step 2, rank 1: step 0 (no checkpoint))" in outcome
        assert "every process must see the same --out" in outcome
    assert json.loads((tmp_path / "node0" / "run" / "orl.json").read_text())["recipe"]["step"] == 2
    assert len(open(tmp_path / "node0" / "run" / "train.log.jsonl").readlines()) == 2
