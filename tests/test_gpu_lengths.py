"""benchmarks/gpu_lengths.sh end to end on the CPU: the issue-21 device call (the hint4g3 recipe with and without
scalable softmax, trained side by side, then threshold and fused evaluations) with a few steps of a smaller model
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
def test_both_variants_train_evaluate_and_come_back_in_at_most_eight_files(tmp_path, device):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "WORK": str(tmp_path / "work"), "DEVICE": device, "AR_STEPS": "2",
           "DIFF_STEPS": "2", "LIMIT": "1", "SEEDS": "0", "DEADLINE_S": "500", "EVAL_RESERVE": "200",
           "EXTRA_SET": SMALL, "PYTHON": str(Path(os.sys.executable)), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_lengths.sh")], env=env, capture_output=True, text=True,
                         timeout=600)
    log = (out / "log.txt").read_text()
    assert run.returncode == 0, log[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["fused-logn.jsonl", "fused-plain.jsonl", "log.txt", "run-logn.tar", "run-plain.tar",
                     "thr-logn.jsonl", "thr-plain.jsonl"]  # a device call brings back eight at most
    for v, logn in (("plain", False), ("logn", True)):
        assert f"gpu-{v} step 4" in log  # 2 AR + 2 diffusion steps, the step reported before the evaluations
        with tarfile.open(out / f"run-{v}.tar") as tar:
            names = set(tar.getnames())
            assert f"gpu-{v}/model.safetensors" in names and f"gpu-{v}/trainer_state.pt" not in names
            manifest = json.load(tar.extractfile(f"gpu-{v}/orl.json"))
        assert manifest["model_args"]["attn_logn"] is logn and manifest["layout"] == "absolute_grid"
        thr = [json.loads(line) for line in (out / f"thr-{v}.jsonl").read_text().splitlines()]
        fused = [json.loads(line) for line in (out / f"fused-{v}.jsonl").read_text().splitlines()]
        # one prompt per family and split: long7xp and prog7xp, in range and beyond
        assert len(thr) == 4 and len(fused) == 4
        assert {r["task"] for r in thr} == {"long7xp", "prog7xp"}
