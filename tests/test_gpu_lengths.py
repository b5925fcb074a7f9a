"""benchmarks/gpu_lengths.sh end to end on the CPU: the issue-21 device call (the hint4g3 recipe's variants and
training seeds, trained side by side, then threshold and fused evaluations) with a few steps of a smaller model
and one prompt per cell, so that a lent GPU's one call does not fail on its plumbing. On a GPU, `-k cuda` is that
call's preflight."""
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--set threads=1 --set eval_samples=1 --set model.dim=32 --set model.n_layers=1 --set model.n_heads=2 "
         "--set model.n_kv_heads=1 --set model.head_dim=16 --set model.ffn_dim=64")


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_variants_train_evaluate_and_come_back_in_at_most_eight_files(tmp_path, device):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "WORK": str(tmp_path / "work"), "DEVICE": device, "AR_STEPS": "2",
           "DIFF_STEPS": "2", "LIMIT": "1", "SEEDS": "0", "DEADLINE_S": "500", "EVAL_RESERVE": "200",
           "VARIANTS": "plain@0 pflogn@1 bal", "WEIGHTS": "2",
           "EXTRA_SET": SMALL, "PYTHON": str(Path(os.sys.executable)), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_lengths.sh")], env=env, capture_output=True, text=True,
                         timeout=600)
    log = (out / "log.txt").read_text()
    assert run.returncode == 0, log[-3000:]
    files = sorted(p.name for p in out.iterdir())
    # weights of the first WEIGHTS runs only: a device call brings back eight files at most
    assert files == ["fused.jsonl", "log.txt", "logs.tgz", "run-gpu-pflogn-s1.tar", "run-gpu-plain-s0.tar",
                     "thr.jsonl"]
    assert "gpu-bal-s0: weights left on the device" in log
    thr = [json.loads(line) for line in (out / "thr.jsonl").read_text().splitlines()]
    fused = [json.loads(line) for line in (out / "fused.jsonl").read_text().splitlines()]
    with tarfile.open(out / "logs.tgz") as tar:
        logs = {name: tar.extractfile(name) for name in tar.getnames() if name.endswith("orl.json")}
        manifests = {name.split("/")[0]: json.load(f) for name, f in logs.items()}
        trained = {name.split("/")[0]: [json.loads(line) for line in tar.extractfile(name)]
                   for name in tar.getnames() if name.endswith("train.log.jsonl")}
    for run, logn, helper, seed in (("gpu-plain-s0", False, False, 0), ("gpu-pflogn-s1", True, True, 1),
                                    ("gpu-bal-s0", False, False, 0)):
        assert f"{run} step 4" in log  # 2 AR + 2 diffusion steps, the step reported before the evaluations
        manifest = manifests[run]
        assert manifest["model_args"]["attn_logn"] is logn and manifest["layout"] == "absolute_grid"
        config = manifest["recipe"]["config"]
        assert config["seed"] == seed and ("prog7xpf" in config["tasks"]) is helper
        assert config["balance"] == (["long7xp", "prog7xp"] if run == "gpu-bal-s0" else [])
        # the balanced run logs its rows per step: long7xp and prog7xp share 24, the helpers keep 6 each
        rows = [r.get("rows") for r in trained[run]]
        if run == "gpu-bal-s0":
            assert all(r["long7xp"] + r["prog7xp"] == 24 and r["long7xpf"] == 6 for r in rows)
        else:
            assert rows == [None] * len(rows)
        # one prompt per family and split: long7xp and prog7xp, in range and beyond
        mine = [r for r in thr if r["model"]["name"] == run]
        assert len(mine) == 4 and {r["task"] for r in mine} == {"long7xp", "prog7xp"}
        assert len([r for r in fused if r["model"]["name"] == run]) == 4
    for run in ("gpu-plain-s0", "gpu-pflogn-s1"):
        with tarfile.open(out / f"run-{run}.tar") as tar:
            names = set(tar.getnames())
        assert f"{run}/model.safetensors" in names and f"{run}/trainer_state.pt" not in names


@pytest.mark.slow
def test_keep_every_chooses_on_validation_and_tests_the_chosen_copy_beside_the_final(tmp_path):
    """KEEP_EVERY: the block-diffusion copies and the final checkpoint on the validation seeds (the AR-stage copy
    left out), one chosen per run by orl/eval/select.py, and the test evaluation of the chosen one beside the
    final one; val.jsonl comes back."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "WORK": str(tmp_path / "work"), "DEVICE": "cpu", "AR_STEPS": "2",
           "DIFF_STEPS": "4", "LIMIT": "1", "SEEDS": "0", "VAL_SEEDS": "100", "VAL_LIMIT": "2", "KEEP_EVERY": "2",
           "DEADLINE_S": "500", "EVAL_RESERVE": "250", "VARIANTS": "plain@0", "WEIGHTS": "1", "EXTRA_SET": SMALL,
           "PYTHON": str(Path(os.sys.executable)), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_lengths.sh")], env=env, capture_output=True, text=True,
                         timeout=600)
    log = (out / "log.txt").read_text()
    assert run.returncode == 0, log[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["fused.jsonl", "log.txt", "logs.tgz", "run-gpu-plain-s0.tar",
                                                     "thr.jsonl", "val.jsonl"]
    val = [json.loads(line) for line in (out / "val.jsonl").read_text().splitlines()]
    # copies at steps 2 (the AR stage: not a candidate) and 4; 6 is the final checkpoint itself
    assert {r["model"]["name"] for r in val} == {"gpu-plain-s0-at4", "gpu-plain-s0"}
    assert all(r["index"] >= 100 * 2 ** 32 for r in val) and len(val) == 2 * 2 * 2 * 2
    (chosen,) = [line.split(": ")[-1] for line in log.splitlines() if "chosen on validation" in line]
    assert chosen in {"gpu-plain-s0-at4", "gpu-plain-s0"} and "<- chosen" in log
    thr = [json.loads(line) for line in (out / "thr.jsonl").read_text().splitlines()]
    assert {r["model"]["name"] for r in thr} == {chosen, "gpu-plain-s0"}
    assert all(r["index"] < 2 ** 32 for r in thr) and len(thr) == 4 * len({chosen, "gpu-plain-s0"})
    fused = [json.loads(line) for line in (out / "fused.jsonl").read_text().splitlines()]
    assert {r["model"]["name"] for r in fused} == {"gpu-plain-s0"}


@pytest.mark.parametrize("variants, extra, message", [
    ("plain@0 nope@1", "", "unknown recipe in nope@1"),
    ("plain@x", "", "bad seed in plain@x"),
    ("pf@1 pf@01", "", "pf@01 is listed twice"),
    (" ", "", "VARIANTS is empty"),
    ("plain@0 plain@1 plain@2 pf@0 pf@1 pf@2 logn@0", "", "7 variants: at most 6"),
    ("plain@0", "--set nope=1", "the training settings (EXTRA_SET: --set nope=1) are refused"),
    ("plain@0", "KEEP_EVERY=x", "KEEP_EVERY=x: a whole number"),
    ("plain@0", "KEEP_EVERY=500 WEIGHTS=4", "WEIGHTS=4 with KEEP_EVERY"),
    ("plain@0", "KEEP_EVERY=500 WEIGHTS=3 VAL_SEEDS=1 SEEDS=0,1", "share seed 1")])
def test_a_bad_call_stops_before_anything_trains(tmp_path, variants, extra, message):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "WORK": str(tmp_path / "work"), "VARIANTS": variants, "DEVICE": "cpu",
           "PYTHON": str(Path(os.sys.executable)), "OMP_NUM_THREADS": "1"}
    if extra.startswith("--set"):
        env["EXTRA_SET"] = extra
    else:  # environment settings
        env.update(kv.split("=", 1) for kv in extra.split())
        env["SEEDS"] = env.get("SEEDS", "0 1 2").replace(",", " ")
    run = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_lengths.sh")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert message in (out / "log.txt").read_text()
    calls = list((tmp_path / "work").iterdir())  # one fresh folder per call, with no run in it
    assert len(calls) == 1 and not [p for p in calls[0].iterdir() if p.name.startswith("gpu-")]
