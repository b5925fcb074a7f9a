"""Training under torchrun (orl/train/dist.py): two CPU processes over gloo give the single-process run
up to the order of floating-point sums - pretraining through `torchrun -m orl.cli train`, ORL and RCD
through forked ranks that call the recipes (they inherit the test's verifier) - and resume works."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import orl.train.orl as trainer
import orl.train.pretrain as pretrain_mod
import orl.train.rcd as rcd
from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.eval.tasks import SUITE
from orl.model import ModelArgs, Transformer
from orl.presets import get_preset
from orl.tokenizer import CharTokenizer
from orl.train.batches import ar_batch
from orl.train.dist import Dist, setup, shard_rows
from orl.train.rollout import sample_prompts

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-5  # fp32: the two runs differ only in the order of sums


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    fn(*args)


def two_ranks(fn, *args) -> None:
    """fn(*args) in two processes joined as torchrun would join them. Forked, so that they start in
    milliseconds and keep the test's monkeypatches; a rank that raises fails the test."""
    mp.start_processes(_rank, args=(2, free_port(), fn, args), nprocs=2, start_method="fork")


def torchrun_cli(*argv: str) -> str:
    """`torchrun --nproc-per-node 2 -m orl.cli ARGV` from the repository root, one thread per process;
    its output (it must exit 0)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "orl.cli", *argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr


def max_diff(a, b) -> float:
    sa, sb = load_checkpoint(a)[0].state_dict(), load_checkpoint(b)[0].state_dict()
    assert sa.keys() == sb.keys()
    return max((sa[k] - sb[k]).abs().max().item() for k in sa)


def records(path, key):
    return {r[key]: r for r in map(json.loads, open(path))}


def same_records(a, b, key, fields):
    ra, rb = records(a, key), records(b, key)
    assert sorted(ra) == sorted(rb)
    for s in ra:
        for f in fields:
            assert ra[s][f] == pytest.approx(rb[s][f], abs=2e-5), (s, f)


# ---- the pieces -------------------------------------------------------------------------------------

def test_shards_cover_everything_once_in_order():
    for n in (1, 2, 3, 7):
        for world in (1, 2, 3):
            parts = [list(Dist(rank=r, world=world).shard(n)) for r in range(world)]
            assert sum(parts, []) == list(range(n))


def test_shard_rows_takes_every_world_th_row_and_pads_an_empty_share():
    tok = CharTokenizer()
    batch = ar_batch([([5, 6, 7], [8, 9]), ([5], [8]), ([6], [9, 9, 9])], tok.pad_id, tok.eos_id)
    r1 = shard_rows(batch, Dist(rank=1, world=2))
    assert torch.equal(r1.tokens, batch.tokens[1:2]) and torch.equal(r1.weight, batch.weight[1:2])
    assert r1.tokens.shape[1] == batch.tokens.shape[1]  # the whole batch's padding
    r3 = shard_rows(batch, Dist(rank=3, world=4))  # 3 rows, 4 ranks: rank 3 has none
    assert r3.tokens.shape[0] == 1 and r3.weight.sum() == 0 and torch.equal(r3.tokens, batch.tokens[:1])
    assert shard_rows(batch, Dist()).tokens is not None and torch.equal(shard_rows(batch, Dist()).weight, batch.weight)


def test_setup_reads_torchrun_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert setup() == Dist()  # not launched: one process, on the CPU unless asked (GPU hosts too)
    assert setup("cpu") == Dist() and not setup("cpu").launched  # one process: no process group, no NCCL
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):  # named before any model is loaded
            setup("cuda")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        setup("gpu0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK='two' is not an integer"):
        setup()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="RANK=2 is outside WORLD_SIZE=2"):
        setup()
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="mps"):  # absent here; on a Mac: not a torchrun device
        setup("mps")


EXIT_PROBE = """
import sys
import torch.distributed as tdist
from orl.train.dist import setup

class Held:  # a finished run's model in a reference cycle, as FSDP2's hooks hold one
    def __del__(self):
        print("freed with the group", tdist.is_initialized(), file=sys.stderr, flush=True)

def run():
    h = Held()
    h.me = h
    if FAIL:
        raise RuntimeError("the run failed")  # uncaught: its frame, h in it, stays in sys.last_traceback


assert setup().launched
run()
"""


@pytest.mark.parametrize("fail", [False, True])
def test_a_launched_process_frees_its_cycles_before_leaving_the_group(fail):
    """What a run leaves in reference cycles is freed at exit while the process group still exists,
    not during interpreter finalization after it (where a CI rank of an FSDP run aborted, SIGABRT),
    also when an uncaught exception ended it (`orl --debug`). Fails with the group left without a
    collection first ('freed with the group False' or no line at all), and, for the failed run, without
    the exception's frames dropped first."""
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, "-c", f"FAIL = {fail}\n" + EXIT_PROBE], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == (1 if fail else 0), p.stderr[-2000:]
    assert ("the run failed" in p.stderr) == fail
    assert "freed with the group True" in p.stderr, p.stderr[-2000:]


def test_more_processes_than_prompts_is_refused(base, tmp_path, monkeypatch):
    import orl.train.rollout as rollout

    monkeypatch.setattr(rollout, "setup", lambda device=None: Dist(rank=0, world=4))  # ORL and RCD start in rollout.start_run
    with pytest.raises(ValueError, match="prompts_per_update=3 is less than the 4 processes"):
        trainer.train_orl(orl_cfg(base), tmp_path / "run", log=lambda *_: None)
    assert not (tmp_path / "run").exists()


# ---- pretraining: torchrun + the CLI ------------------------------------------------------------------

PRETRAIN_SET = {"ar_steps": 3, "diffusion_steps": 3, "save_every": 2, "eval_every": 100, "eval_samples": 1,
                "threads": 1}


def test_pretrain_under_torchrun_resumes_and_matches_one_process(tmp_path, monkeypatch):
    """A one-process run crashes after its step-2 checkpoint; `torchrun --nproc-per-node 2 -m orl.cli
    train` resumes it through the rest of stage 1 (the stage-1 save) and stage 2, and ends where an
    uninterrupted one-process run ends. Batch 8 over 5 tasks gives single-row micro-batches, so one
    rank trains a zero-weight row there."""
    cfg = dataclasses.replace(get_preset("pretrain", "smoke"), **PRETRAIN_SET)
    quiet = lambda *_: None  # noqa: E731
    pretrain_mod.pretrain(cfg, tmp_path / "one", log=quiet)
    real, calls = pretrain_mod.train_step, []

    def crashing(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(pretrain_mod, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        pretrain_mod.pretrain(cfg, tmp_path / "two", log=quiet)
    out = torchrun_cli("train", "--preset", "smoke", "--out", str(tmp_path / "two"),
                       *(x for k, v in PRETRAIN_SET.items() for x in ("--set", f"{k}={v}")))
    assert out.count("resumed from") == 1 and out.count("done: steps 3-6") == 1  # rank 0 alone speaks
    assert max_diff(tmp_path / "one", tmp_path / "two") < ATOL
    assert max_diff(tmp_path / "one" / "stage1", tmp_path / "two" / "stage1") < ATOL
    same_records(tmp_path / "one" / "train.log.jsonl", tmp_path / "two" / "train.log.jsonl", "step", ["loss", "grad_norm", "lr"])
    assert len(open(tmp_path / "two" / "train.log.jsonl").readlines()) == 6  # each step logged once


# ---- ORL and RCD: forked ranks ------------------------------------------------------------------------

@pytest.fixture()
def base(tmp_path):
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    return save_checkpoint(model, CharTokenizer(), tmp_path / "base", {"block_len": 8})


def orl_cfg(base, **kw):
    from orl.engine import DecodeConfig

    fields = dict(base=str(base), updates=3, prompts_per_update=3, group_size=2, save_every=2, eval_every=100,
                  eval_samples=1, threads=1, adapter_dim=16, lr=1e-3,
                  rollout=DecodeConfig(block_len=8, max_new_tokens=16, threshold=0.3, temperature=0.8,
                                       residual="adapter"))
    return dataclasses.replace(get_preset("orl", "smoke"), **{**fields, **kw})


@pytest.fixture()
def verifier(monkeypatch):
    """Accept every rollout (a random base is never right) except those of the prompts in the set."""
    reject: set[str] = set()
    real = trainer.collect

    def collect(*args, **kw):
        rs = real(*args, **kw)
        for r in rs:
            r.verified = r.sample.prompt not in reject
        return rs

    monkeypatch.setattr(trainer, "collect", collect)
    monkeypatch.setattr(rcd, "collect", collect)
    return reject


def run_orl(cfg, out):
    trainer.train_orl(cfg, out, log=lambda *_: None)


def run_rcd(cfg, out):
    rcd.train_rcd(cfg, out, log=lambda *_: None)


ORL_FIELDS = ["loss", "pred", "aec", "kl", "entropy", "grad_norm", "adapter_grad_norm", "kept", "rollout_reward", "rollout_tpf",
              "rollout_steps_per_block", "rollout_tokens", "generated_tokens"]


def test_orl_two_processes_match_one_and_resume(base, tmp_path, verifier):
    """Prompts 0 | 1-2 go to ranks 0 | 1; in update 2 rank 0's prompt is rejected, so rank 0 keeps
    nothing and replays at weight 0 while the update is rank 1's alone - as in one process."""
    verifier.add(sample_prompts(SUITE, 3, "orl|0|1")[0].prompt)  # the base records no tasks: SUITE
    cfg = orl_cfg(base)
    run_orl(cfg, tmp_path / "one")
    two_ranks(run_orl, dataclasses.replace(cfg, updates=2), tmp_path / "two")
    two_ranks(run_orl, cfg, tmp_path / "two")  # resumes at update 2 (updates may grow on resume)
    one, two = records(tmp_path / "one" / "train.log.jsonl", "update"), records(tmp_path / "two" / "train.log.jsonl", "update")
    assert one[2]["kept"] == 4 and one[1]["kept"] == 6  # the rejected prompt took effect
    same_records(tmp_path / "one" / "train.log.jsonl", tmp_path / "two" / "train.log.jsonl", "update", ORL_FIELDS)
    assert max_diff(tmp_path / "one", tmp_path / "two") < ATOL
    assert load_checkpoint(tmp_path / "two")[2]["recipe"]["update"] == 3


@pytest.mark.parametrize("recipe", ["stale_fastest", "rcd", "ar_anchor"])
def test_ablations_two_processes_match_one(base, tmp_path, verifier, recipe):
    """The stale-rollout ablation (a reference model for the KL anchor) with keep="fastest", the
    off-policy RCD baseline (the kept answers gathered from every rank into one staircase batch), and the
    AR-path anchor (its own backward accumulated without a sync before the ORL loss's)."""
    if recipe == "rcd":
        c = orl_cfg(base, updates=2)
        cfg = rcd.RCDConfig(base=c.base, updates=2, prompts_per_update=3, group_size=2, save_every=2, eval_every=100,
                            eval_samples=1, threads=1, rollout=dataclasses.replace(c.rollout, residual="rcd"))
        run, fields = run_rcd, ["loss", "grad_norm", "kept", "rollout_tpf", "generated_tokens"]
    elif recipe == "ar_anchor":
        from orl.train.objective import LossWeights
        verifier.add(sample_prompts(SUITE, 3, "orl|0|1")[0].prompt)  # rank 0 keeps nothing in update 2
        cfg, run, fields = orl_cfg(base, updates=2, weights=LossWeights(lambda_ar=2.0, lambda_ar_kl=2.0)), run_orl, \
            ORL_FIELDS + ["ar", "ar_kl"]
    else:
        cfg, run, fields = orl_cfg(base, updates=2, rollout_reuse=2, keep="fastest", kl_conf=0.0), run_orl, ORL_FIELDS
    run(cfg, tmp_path / "one")
    two_ranks(run, cfg, tmp_path / "two")
    same_records(tmp_path / "one" / "train.log.jsonl", tmp_path / "two" / "train.log.jsonl", "update", fields)
    assert max_diff(tmp_path / "one", tmp_path / "two") < ATOL
    if recipe == "stale_fastest":  # the second update reused the first one's rollouts against the stale weights
        recs = records(tmp_path / "two" / "train.log.jsonl", "update")
        assert recs[1]["generated_tokens"] == recs[2]["generated_tokens"] and recs[2]["kl"] > 0


def _refused(cfg, out, result_dir):
    try:
        run_orl(cfg, out)
        outcome = "ran"
    except Exception as e:  # noqa: BLE001 - each rank records how it stopped
        outcome = f"{type(e).__name__}: {e}"
    (result_dir / f"rank{os.environ['RANK']}").write_text(outcome)


def test_a_refused_output_stops_every_rank(base, tmp_path, verifier):
    """Rank 0 alone checks --out; when it refuses, the other rank stops too instead of waiting forever,
    and nothing is written."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    two_ranks(_refused, orl_cfg(base), tmp_path / "run", tmp_path)
    assert "ResumeError" in (tmp_path / "rank0").read_text() and "notes.txt" in (tmp_path / "rank0").read_text()
    assert "rank 0 failed" in (tmp_path / "rank1").read_text()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("recipe", ["orl", "rcd"])
def test_an_untied_base_with_an_adapter_it_does_not_use_trains_under_two_processes(tmp_path, verifier, recipe):
    """A base that already has a residual adapter (an ORL checkpoint), an untied head, and rollouts that do not
    use the adapter: the losses read the head outside the wrapped forward, which DDP's find_unused_parameters
    refuses ("marked ready twice"); the unused adapter is frozen instead, and two processes match one."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True,
                                  tie_embeddings=False, adapter_dim=8))
    base = save_checkpoint(model, CharTokenizer(), tmp_path / "base", {"block_len": 8})
    c = orl_cfg(base, updates=2, rollout=dataclasses.replace(orl_cfg(base).rollout, residual="off"))
    if recipe == "rcd":
        cfg = rcd.RCDConfig(base=c.base, updates=2, prompts_per_update=3, group_size=2, save_every=2, eval_every=100,
                            eval_samples=1, threads=1, rollout=dataclasses.replace(c.rollout, residual="rcd"))
        run, fields = run_rcd, ["loss", "grad_norm", "kept", "rollout_tpf", "generated_tokens"]
    else:
        cfg, run, fields = c, run_orl, [f for f in ORL_FIELDS if f != "adapter_grad_norm"]
    run(cfg, tmp_path / "one")
    two_ranks(run, cfg, tmp_path / "two")
    same_records(tmp_path / "one" / "train.log.jsonl", tmp_path / "two" / "train.log.jsonl", "update", fields)
    assert max_diff(tmp_path / "one", tmp_path / "two") < ATOL
    one = load_checkpoint(tmp_path / "one")[0].state_dict()
    assert all(torch.equal(one[k], model.state_dict()[k]) for k in one if "residual_adapter" in k)  # untouched
