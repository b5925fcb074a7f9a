"""benchmarks/gpu_convert.sh end to end: a tiny Gemma 3 GGUF and its corpus staged in pieces, joined,
imported, its step time probed, converted in one process until its time limit, then evaluated - the
plumbing of the one device call that a lent GPU would run on the real 270M model (on the CPU here; on
the GPU, the cuda case is that call's preflight)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip("gguf")

import device_stage  # noqa: E402
from gguf_tiny import write_tiny_gguf  # noqa: E402

from orl.checkpoint import load_checkpoint  # noqa: E402
from orl.gguf_import import import_gguf  # noqa: E402
from orl.train.corpus import CorpusConfig, build_corpus  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_staged_tiny_gguf_converts_and_is_evaluated(tmp_path, device):
    """On a lent GPU, `-k cuda` is the preflight of the real call: the same script on a tiny model."""
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    _, tok, _ = _imported(gguf, tmp_path / "probe")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(60):  # held-out windows of 68 tokens need a few thousand held-out tokens
        (src / f"m{i}.py").write_text("".join(f"def fib_{i}_{j}(n):\n    return n + {i * j}\n\n" for j in range(30)))
    corpus = tmp_path / "corpus"
    build_corpus(tok, CorpusConfig(roots=(str(src),), train_tokens=30_000, heldout_tokens=8_000, heldout_frac=0.2,
                                   tasks=("constr",), task_samples=20), corpus, log=lambda *_: None)
    stage = tmp_path / "stage"
    device_stage.split([gguf, corpus / "corpus.json", corpus / "tokens.safetensors"], stage, 40_000)
    for piece in sorted(stage.iterdir()):
        device_stage.put(piece, tmp_path / "store")
    out, work = tmp_path / "out", tmp_path / "work"
    # a warm rerun's leftovers: an earlier call's run, which must be neither evaluated nor returned nor deleted
    (work / "run").mkdir(parents=True)
    (work / "run" / "orl.json").write_text("{}")
    (work / "run" / "train.log.jsonl").write_text('{"step": 99, "stale": true}\n')
    env = {**os.environ, "OUT": str(out), "STORE": str(tmp_path / "store"), "WORK": str(work), "TRAIN_S": "0.001",
           "PRESET": "smoke", "GGUF": "tiny.gguf", "PYTHON": sys.executable, "DEVICE": device,
           # gemma_convert_gpu's settings on the smoke shapes: two micro-batches (code, task text), bf16
           # autocast, frozen tied embeddings (the head's no-weight-gradient path), no recomputation; and the
           # next lease's draft rows with AR targets (RESULTS-gemma, "The next lease")
           "EXTRA_SET": "--set mix=2,1,0 --set bf16=true --set freeze_embeddings=true --set checkpointing=false "
                        "--set ar_aux=0.5 --set draft_aux=1.0 --set draft_target=ar",
           "OMP_NUM_THREADS": "1", "EVAL_WINDOWS": "32",  # the tiny corpus's held-out text holds 32 windows
           "ROWS_X": "2", "ROWS_GAIN": "0"}  # the second probe at twice the rows, always kept: its path runs
    env.pop("STEPS", None), env.pop("DEADLINE_S", None)
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_convert.sh")], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # what a device call brings back: at most 8 files, named in letters, digits, '.', '_' and '-'
    names = sorted(p.name for p in out.iterdir())
    assert names == ["evals.json", "heldout32.json", "log.txt", "p00", "probe.jsonl", "train.log.jsonl", "train.out"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)
    # the weights come back: p00 from this call, the others as the return calls would copy them
    import device_return
    pieces = sorted((work / "ret" / "p").iterdir())
    assert pieces[0].name == "p00" and (out / "p00" / "piece").read_bytes() == (pieces[0] / "piece").read_bytes()
    for piece in [out / "p00", *pieces[1:]]:
        device_stage.put(piece, tmp_path / "back_store")
    device_stage.join(tmp_path / "back_store", tmp_path / "back_delta")
    back = device_return.unpack(tmp_path / "back_delta", work / "base", tmp_path / "back")
    _, _, manifest = load_checkpoint(back)
    assert manifest["objective"] == "block_diffusion" and manifest["returned"]["delta_dtype"] == "bfloat16"
    # the probe timed the preset's steps and sized the schedule (at least 3 steps) ...
    probe = [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines()]
    assert probe[0]["bf16"] and probe[0]["freeze_embeddings"] and probe[0]["batches"] == "the run's (--corpus)"
    assert probe[-1]["summary"]["s_per_step"] > 0 and probe[-1]["summary"]["device"].startswith(device)
    # the 2x probe was kept: its summary is the last line, and the run trained at its mix
    assert [x["mix"] for x in probe if "mix" in x] == [[2, 1, 0], [4, 2, 0]], (out / "log.txt").read_text()[-3000:]
    assert sum("summary" in x for x in probe) == 2
    assert "training at mix 4,2,0" in (out / "log.txt").read_text()
    run_cfg = json.loads((work / "run" / "orl.json").read_text())["recipe"]["config"]
    assert run_cfg["mix"] == [4, 2, 0] and (run_cfg["draft_aux"], run_cfg["draft_target"]) == (1.0, "ar")
    prof = next(x["profile"] for x in probe if "profile" in x)  # where a step's time goes, op by op
    assert prof["clock"] == ("device" if device == "cuda" else "cpu") and 0 < len(prof["top"]) <= 15
    assert prof["self_total_ms"] > 0 and all(0 <= t["frac"] <= 1 for t in prof["top"])
    # ... and the time limit stopped the run after its first step, saved there, and said so
    assert [p.name.split("-")[0] for p in work.glob("run.old-*")] == ["run.old"]  # moved aside, kept
    log = [json.loads(x) for x in (out / "train.log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in log if "step" in x] == [1]
    assert "done: steps 1-1 of 3" in (out / "train.out").read_text()
    evals = json.loads((out / "evals.json").read_text())
    assert [e["threshold"] for e in evals] == [0.9, 0.5, 0.3, None]  # None: the self-speculative decode
    assert evals[-1]["decoder"] == "self-spec fused k=3"
    for e in evals:
        assert e["dlm_recipe_step"] == 1 and e["device"] == device and e["next_block"]["n"] == 32
    held = json.loads((out / "heldout32.json").read_text())
    assert held["windows"] == 32 and held["heldout_loss"] > 0 and held["device"] == device
    text = (out / "log.txt").read_text()
    assert "=== done" in text and "step 1 tau 0.9: next-block exact" in text  # the summary comes back in the tail


def test_a_missing_piece_stops_the_call_before_anything_runs(tmp_path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    device_stage.split([gguf], tmp_path / "stage", 20_000)
    device_stage.put(tmp_path / "stage" / "p00", tmp_path / "store")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "STORE": str(tmp_path / "store"), "WORK": str(tmp_path / "w"),
           "PYTHON": sys.executable, "DEVICE": "cpu"}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_convert.sh")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3 and "lacks" in r.stdout + r.stderr
    assert not (tmp_path / "w" / "base").exists()


def _imported(gguf: Path, out: Path):
    from orl.checkpoint import load_checkpoint

    import_gguf(gguf, out, dtype=torch.float32)
    return load_checkpoint(out)


def test_no_training_starts_without_time_for_the_evaluations(tmp_path):
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    (tmp_path / "corpus.json").write_text("{}")  # copied, never read: STEPS given, so no probe runs
    (tmp_path / "tokens.safetensors").write_bytes(b"x")
    device_stage.split([gguf, tmp_path / "corpus.json", tmp_path / "tokens.safetensors"], tmp_path / "stage", 2_000_000)
    device_stage.put(tmp_path / "stage" / "p00", tmp_path / "store")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "STORE": str(tmp_path / "store"), "WORK": str(tmp_path / "w"),
           "PYTHON": sys.executable, "DEVICE": "cpu", "GGUF": "tiny.gguf", "STEPS": "3", "DEADLINE_S": "100",
           "EVAL_RESERVE": "1000"}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_convert.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 5 and "no time left to train" in r.stdout, r.stdout[-2000:]
    assert not (tmp_path / "w" / "run").exists()
