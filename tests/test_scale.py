"""benchmarks/scale.py, the real-shape benchmark, in its tiny CPU configuration run by
benchmarks/gpu_check.sh: every peer and
quantized form produces a row, the forced commit schedule gives exactly the asked TPF, the bytes a
forward must read are counted as documented, and the time budget skips jobs in priority order."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import scale  # noqa: E402
import scale_shapes  # noqa: E402

from orl.quant import quantize  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_gpu_check_runs_the_tiny_table_on_a_cpu(tmp_path):
    """benchmarks/gpu_check.sh, the one device call, in its CPU mode (GPU_CHECK_CPU=1: scale.py --tiny
    on two shapes; the gpu tests skipped here, they skip without CUDA anyway): every peer and
    quantized form produces a row."""
    env = {**os.environ, "GPU_CHECK_CPU": "1", "GPU_CHECK_SKIP_TESTS": "1", "OUT": str(tmp_path),
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "=== done, status 0" in (tmp_path / "gpu_check.log").read_text()
    # the fused self-draft's question: rows for T = 1 .. 145 and the implied tokens/s ratio
    lengths = (tmp_path / "forward_length.txt").read_text()
    assert "   145 " in lengths and "fused vs two-forward self-speculative tokens/s" in lengths, lengths
    data = json.loads((tmp_path / "scale.json").read_text())
    rows = data["rows"]
    assert not [r for r in rows if "FAILED" in r.get("note", "")], [r for r in rows if "note" in r]
    got = {(r["shape"], r["peer"].split("-compiled")[0], r["form"], r.get("tpf_target")): r for r in rows}
    for shape, tpfs in (("qwen3-0.6b", (1, 8)), ("llada2-mini", (8,))):
        for k in tpfs:
            r = got[(shape, "dlmrt", "base", k)]
            assert r["tpf"] == k and r["tokens"] == 16 and r["layers"] == 2  # forced schedule, no EOS
            assert r["roofline"] > 0 and r["mb_fwd"] > 0 and r["tok_s"] > 0
        assert got[(shape, "dlmrt", "fp8", tpfs[0])]["paths"] == "fp8:emulated"
        assert got[(shape, "dlmrt", "int8", 8)]["paths"] == "int8:dequantize"
        assert got[(shape, "dlmrt", "nvfp4", 8)]["paths"] == "nvfp4:emulated"
        assert got[(shape, "prefix-cache", "base", None)]["tokens"] == 16
    ar = next(r for r in rows if r["shape"] == "qwen3-0.6b" and r["peer"].startswith("hf-ar"))
    assert ar.get("tpf") == 1 or "not importable" in ar["note"]  # transformers is a dev extra
    assert "skipped" in got[("llada2-mini", "hf-ar", "base", None)]["note"]
    assert data["meta"]["tiny"] and data["meta"]["bandwidth"] > 0


def test_bytes_read_per_forward():
    args = scale.parse_args(["--tiny", "--device", "cpu"])
    dense = scale.build(scale.shape_args("qwen3-0.6b", args), torch.float32, torch.device("cpu"))
    params = sum(p.numel() * 4 for p in dense.parameters())  # tied head: the table is read as the head
    assert scale_shapes.weight_bytes_per_forward(dense) == params
    moe = scale.build(scale.shape_args("llada2-mini", args), torch.float32, torch.device("cpu"))
    emb = moe.model.embed_tokens.weight.numel() * 4  # untied: the lookup reads L rows, not the table
    assert scale_shapes.weight_bytes_per_forward(moe) == sum(p.numel() * 4 for p in moe.parameters()) - emb
    fp8 = quantize(dense, "fp8")
    assert scale_shapes.weight_bytes_per_forward(fp8) < params  # stored size (1 byte + a scale per row)
    kw = scale.shape_args("qwen3-0.6b", args)
    assert scale_shapes.kv_bytes(kw, 32, torch.bfloat16) == 2 * 2 * kw["n_kv_heads"] * 32 * kw["head_dim"] * 2


def test_jobs_in_priority_order_and_budget(capsys):
    args = scale.parse_args(["--tiny", "--device", "cpu", "--shapes", "qwen3-4b,llada2-mini,qwen3-0.6b",
                             "--budget-s", "0"])
    order = scale.jobs(args)
    # the first two shapes (the targets) pair by pair, then the rest shape by shape
    assert order[:6] == [("qwen3-4b", "dlmrt", "base"), ("llada2-mini", "dlmrt", "base"), ("qwen3-4b", "dlmrt", "fp8"),
                         ("llada2-mini", "dlmrt", "fp8"), ("qwen3-4b", "hf", "base"), ("llada2-mini", "hf", "base")]
    assert order[12:14] == [("qwen3-0.6b", "dlmrt", "base"), ("qwen3-0.6b", "dlmrt", "fp8")]
    assert len(order) == 18 == len(set(order))
    rows, _ = scale.run(args)
    assert len(rows) == 18 and all(r["note"].startswith("skipped: budget") for r in rows)


def test_bad_tpf_is_refused():
    with pytest.raises(SystemExit):
        scale.parse_args(["--tpf", "3"])  # 3 does not divide the block length 32


def test_moe_shape_has_a_dense_first_layer():
    """LLaDA2.0-mini's config.json: first_k_dense_replace 1, so layer 0 is a dense SwiGLU of
    intermediate_size 5120 and layers 1..19 MoE; built on the meta device (no memory), its parameter
    count is the published ~16B (17.0B with layer 0 as MoE too)."""
    from orl.model import ModelArgs, Transformer
    from orl.model.moe import MoE

    args = scale.parse_args(["--device", "cpu"])
    kw = scale.shape_args("llada2-mini", args)
    a = ModelArgs(**kw)
    assert [i for i in range(a.n_layers) if not a.is_moe_layer(i)] == [0]
    with torch.device("meta"):
        model = Transformer(a)
    assert not isinstance(model.model.layers[0].mlp, MoE) and isinstance(model.model.layers[1].mlp, MoE)
    assert model.model.layers[0].mlp.gate_proj.weight.shape == (5120, 2048)
    assert 16.2e9 < sum(p.numel() for p in model.parameters()) < 16.3e9
    tiny = scale.build(scale.shape_args("llada2-mini", scale.parse_args(["--tiny", "--device", "cpu"])),
                       torch.float32, torch.device("cpu"))
    assert [isinstance(layer.mlp, MoE) for layer in tiny.model.layers] == [False, True]  # the --tiny rows too
