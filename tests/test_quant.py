"""orl.quant: int8 and FP8 formats, the model transform, checkpoints through the manifest's
`quantization` field, and `orl quantize` (NVFP4's numerics: test_quant_nvfp4.py; the decode step of a
quantized model: test_quant_no_sync.py)."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import orl.quant.fp8 as fp8
from orl import cli, cli_quant
from orl.atomic_dir import file_digest
from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.model import ModelArgs, Transformer
from orl.quant import (KINDS, NonFiniteWeightError, QuantizationError, QuantLinear, linear_paths, quantization_of,
                       quantize, quantized_names, spec, weight_bytes)
from orl.quant.fp8 import Fp8Linear, quantize_fp8, quantize_fp8_rows
from orl.quant.int8 import Int8Linear, quantize_int8
from orl.tokenizer import CharTokenizer

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    args = dict(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48,
                max_seq_len=64, adapter_dim=16)
    return Transformer(ModelArgs(**{**args, **kw})).eval()


def logits(model: Transformer) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, TOK.vocab_size, (2, 12), generator=g)
    pos = torch.arange(12).expand(2, 12)
    with torch.no_grad():
        return model(tokens, pos, torch.ones(2, 12, 12, dtype=torch.bool))


def linear(out_f=24, in_f=32, seed=0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(in_f, out_f, bias=False)


# ---------------------------------------------------------------- int8 and fp8 formats

def test_int8_is_symmetric_per_channel():
    w = torch.randn(16, 40)
    w[3] = 0
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (16,)
    amax = w.abs().amax(1)
    torch.testing.assert_close(scale[amax > 0], amax[amax > 0] / 127)
    assert q.abs().amax(1)[amax > 0].eq(127).all() and q.min() >= -127 and not q[3].any()
    err = (q.float() * scale[:, None] - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())


def test_int8_paths_agree():
    """CPU: bf16 activations use torch._weight_int8pack_mm, fp32 ones the dequantize path."""
    q = Int8Linear.from_linear(linear(), "l")
    x = torch.randn(2, 3, 32)
    assert (q.path_for(torch.bfloat16), q.path_for(torch.float32)) == ("int8pack_mm", "dequantize")
    torch.testing.assert_close(q(x), x @ q.dequantize().T)
    torch.testing.assert_close(q(x.bfloat16()).float(), x @ q.dequantize().T, atol=0.05, rtol=0.02)


def test_fp8_scale_maps_each_row_max_to_448():
    w = torch.randn(8, 64) * torch.logspace(-3, 3, 8)[:, None]
    w[5] = 0
    q, scale = quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (8,)
    nz = w.abs().amax(1) > 0
    assert q.float().abs().amax(1)[nz].eq(448).all() and not q.float()[5].any()
    rel = ((q.float() * scale[:, None] - w).abs() / w.abs().clamp(min=1e-30))[nz]
    big = w[nz].abs() >= scale[nz, None] * 2 ** -6  # e4m3 normals: 3 mantissa bits, error <= 2^-4
    assert bool((rel[big] <= 2 ** -4).all())


def test_fp8_activation_scales_are_per_token_and_sync_free():
    x = torch.randn(5, 32)
    x[2] = 0
    q, scale = quantize_fp8_rows(x)
    assert scale.shape == (5, 1) and bool(torch.isfinite(scale).all()) and not q.float()[2].any()
    torch.testing.assert_close(scale[[0, 1, 3, 4], 0], x.abs().amax(1)[[0, 1, 3, 4]] / 448)


def test_fp8_native_path_logic_on_cpu(monkeypatch):
    """The native path's arithmetic (per-token FP8 activations x per-channel FP8 weights through
    torch._scaled_mm, bf16 out) runs on the CPU's _scaled_mm when forced, against the formula."""
    monkeypatch.setattr(fp8, "on_native_fp8_device", lambda device: True)
    q = Fp8Linear.from_linear(linear(out_f=48, in_f=32), "l")
    assert q.path == "native"
    x = torch.randn(2, 3, 32)
    xq, xs = quantize_fp8_rows(x.reshape(-1, 32))
    want = ((xq.float() * xs) @ (q.weight.float() * q.weight_scale[:, None]).T).bfloat16().float().view(2, 3, 48)
    torch.testing.assert_close(q(x), want, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(q(x), x @ q.dequantize().T, atol=0.15, rtol=0.1)  # W8A8 vs weight-only
    # shapes _scaled_mm cannot take stay emulated even on a capable device
    assert Fp8Linear.from_linear(linear(out_f=24, in_f=32), "l").path == "emulated"


def test_fp8_emulated_path_off_capable_devices():
    q = Fp8Linear.from_linear(linear(out_f=48), "l")
    assert q.path == "emulated"
    x = torch.randn(4, 32)
    torch.testing.assert_close(q(x), x @ q.dequantize().T)


@pytest.mark.gpu
def test_fp8_native_on_gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs a CUDA device with compute capability >= 8.9")
    q = Fp8Linear.from_linear(linear(out_f=64, in_f=64), "l").cuda()
    assert q.path == "native"
    x = torch.randn(7, 64, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize_fp8_rows(x)
    want = (xq.float() * xs) @ (q.weight.float() * q.weight_scale[:, None]).T
    torch.testing.assert_close(q(x).float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_quantized_model_decodes_under_cuda_graphs(kind):
    """Capture proves the quantized step has no host sync on the GPU; replay gives the eager tokens."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import dataclasses

    from orl.engine import DecodeConfig, Engine
    from reference_decoder import random_model

    model = quantize(random_model(vocab_size=TOK.vocab_size), kind).cuda().to(torch.bfloat16)
    if kind == "fp8" and torch.cuda.get_device_capability() >= (8, 9):
        assert linear_paths(model, torch.bfloat16) == ["fp8:native"]
    cfg = DecodeConfig(block_len=8, max_new_tokens=21, threshold=0.5)
    eager = Engine(model, TOK).generate(["hello world", "hi"], cfg)
    graph = Engine(model, TOK).generate(["hello world", "hi"], dataclasses.replace(cfg, cuda_graph=True, chunk_steps=4))
    assert [g.token_ids for g in eager] == [g.token_ids for g in graph]
    assert all(g.token_ids for g in eager)


# ---------------------------------------------------------------- the transform

@pytest.mark.parametrize("kind", KINDS)
def test_quantize_swaps_the_backbone_linears_only(kind):
    m = tiny(n_experts=4, n_experts_per_tok=2, moe_ffn_dim=32)
    ref = logits(m)
    quantize(m, kind)
    swapped = {n for n, mod in m.named_modules() if isinstance(mod, QuantLinear)}
    linears = {n for n, mod in m.named_modules() if isinstance(mod, nn.Linear)}
    assert linears == {"lm_head", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"}  # routers too
    assert all(m.model.layers[i].mlp._packed is None for i in (0, 1))  # no full-precision expert stack left
    assert "model.layers.1.mlp.experts.3.down_proj" in swapped and "model.residual_adapter.up_proj" in swapped
    assert len(swapped) == 2 * (4 + 4 * 3) + 3
    assert quantization_of(m) == spec(kind) and linear_paths(m, torch.float32) == [f"{kind}:" + (
        "dequantize" if kind == "int8" else "emulated")]
    rel = float((logits(m) - ref).norm() / ref.norm())
    assert 0 < rel < {"int8": 0.02, "fp8": 0.1, "nvfp4": 0.3}[kind]


def test_quantize_refuses_bad_input_and_leaves_the_model_untouched():
    m = tiny()
    with pytest.raises(QuantizationError, match="unknown quantization 'int4'; expected one of int8, fp8, nvfp4"):
        quantize(m, "int4")
    with torch.no_grad():
        m.model.layers[1].self_attn.v_proj.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteWeightError, match=r"model\.layers\.1\.self_attn\.v_proj\.weight holds inf or nan"):
        quantize(m, "int8")
    assert quantization_of(m) is None  # nothing swapped: the first layers were not replaced either
    m = quantize(tiny(), "fp8")
    with pytest.raises(QuantizationError, match=r"already quantized \(fp8\)"):
        quantize(m, "int8")


@pytest.mark.parametrize("kind", KINDS)
def test_casts_and_moves_keep_the_storage_formats(kind):
    m = quantize(tiny(), kind)
    dtypes = {n: t.dtype for n, t in m.state_dict().items() if n in quantized_names(m)}
    m = m.to(torch.bfloat16)
    assert {n: t.dtype for n, t in m.state_dict().items() if n in dtypes} == dtypes
    assert m.model.norm.weight.dtype == torch.bfloat16
    assert logits(m).isfinite().all()  # the forward computes in the activations' dtype
    with torch.device("meta"):
        empty = Transformer(tiny().args)
    empty = quantize(empty, kind).to_empty(device="cpu")
    assert {n: t.dtype for n, t in empty.state_dict().items() if n in dtypes} == dtypes


@pytest.mark.parametrize("kind", KINDS)
def test_a_bias_stays_a_plain_parameter(tmp_path, kind):
    m = quantize(tiny(qkv_bias=True), kind).to(torch.bfloat16)
    q = m.model.layers[0].self_attn.q_proj
    assert q.bias.dtype == torch.bfloat16 and "model.layers.0.self_attn.q_proj.bias" not in quantized_names(m)
    torch.testing.assert_close(q(torch.zeros(1, 32, dtype=torch.bfloat16))[0], q.bias)
    d = save_checkpoint(m, TOK, tmp_path / "b")
    loaded, _, manifest = load_checkpoint(d)
    assert manifest["dtype"] == "bfloat16" and torch.equal(logits(loaded), logits(m))


def test_weight_bytes():
    m = tiny()
    before = weight_bytes(m)
    quantize(m, "int8")
    after = weight_bytes(m)
    linear_params = sum(mod.weight.numel() for n, mod in tiny().named_modules()
                        if type(mod) is nn.Linear and n.startswith("model."))
    rows = sum(mod.out_features for mod in m.modules() if isinstance(mod, QuantLinear))
    assert after["quantized"] == linear_params + 4 * rows
    assert after["other"] == before["total"] - 4 * linear_params
    assert after["total"] == after["quantized"] + after["other"]


# ---------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_round_trip_is_exact(tmp_path, kind):
    m = quantize(tiny(), kind)
    d = save_checkpoint(m, TOK, tmp_path / "q", manifest={"block_len": 4})
    manifest = json.loads((d / "orl.json").read_text())
    assert manifest["quantization"] == spec(kind) and manifest["dtype"] == "float32"
    loaded, _, _ = load_checkpoint(d)
    assert quantization_of(loaded) == spec(kind)
    assert torch.equal(logits(loaded), logits(m))
    stored = load_file(d / "model.safetensors")
    assert stored["model.layers.0.mlp.up_proj.weight"].dtype == m.model.layers[0].mlp.up_proj.weight.dtype
    loaded16, _, _ = load_checkpoint(d, dtype=torch.bfloat16)
    assert loaded16.model.layers[0].mlp.up_proj.weight.dtype == stored["model.layers.0.mlp.up_proj.weight"].dtype


def test_save_refuses_a_manifest_that_contradicts_the_quantization(tmp_path):
    with pytest.raises(ValueError, match="manifest key 'quantization' is derived from the model"):
        save_checkpoint(tiny(), TOK, tmp_path / "p", manifest={"quantization": spec("int8")})


def saved(tmp_path: Path, kind: str) -> Path:
    return save_checkpoint(quantize(tiny(), kind), TOK, tmp_path / kind)


def rewrite(d: Path, edit) -> None:
    tensors = load_file(d / "model.safetensors")
    edit(tensors)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    man = json.loads((d / "orl.json").read_text())
    man["files"]["model.safetensors"] = file_digest(d / "model.safetensors")
    (d / "orl.json").write_text(json.dumps(man))


def load_error(d: Path) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    return str(e.value)


def test_loader_names_bad_scales_dtypes_and_missing_tensors(tmp_path):
    d = saved(tmp_path, "nvfp4")
    name = "model.layers.0.self_attn.q_proj"

    def edit(t):
        t[f"{name}.weight_scale"][0, 0] = float("nan")                 # e4m3 NaN block scale
        t["model.layers.1.mlp.down_proj.weight_global_scale"] = torch.tensor(float("inf"))
        t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].to(torch.int16)
        del t["model.layers.1.self_attn.o_proj.weight_scale"]
    rewrite(d, edit)
    msg = load_error(d)
    assert f"non-finite values (inf or nan) in {name}.weight_scale" in msg
    assert "non-finite values (inf or nan) in model.layers.1.mlp.down_proj.weight_global_scale" in msg
    assert ("dtype mismatch model.layers.0.mlp.up_proj.weight: checkpoint torch.int16, the quantization format "
            "says torch.uint8") in msg
    assert "missing tensor model.layers.1.self_attn.o_proj.weight_scale" in msg


def test_loader_names_a_shape_mismatch_and_a_plain_weight_in_a_quantized_checkpoint(tmp_path):
    d = saved(tmp_path, "int8")
    plain = tiny().state_dict()

    def edit(t):
        t["model.layers.0.mlp.gate_proj.weight"] = plain["model.layers.0.mlp.gate_proj.weight"]  # fp32, unquantized
        t["model.layers.0.mlp.up_proj.weight_scale"] = torch.ones(7)
    rewrite(d, edit)
    msg = load_error(d)
    assert "dtype mismatch model.layers.0.mlp.gate_proj.weight: checkpoint torch.float32" in msg
    assert "shape mismatch model.layers.0.mlp.up_proj.weight_scale: checkpoint [7], model expects [48]" in msg


def test_loader_refuses_unknown_quantization_and_checksum_damage(tmp_path):
    d = saved(tmp_path, "fp8")
    man = json.loads((d / "orl.json").read_text())
    for bad, match in (({"kind": "int4", "format": 1}, "quantization .* is not one this orl knows"),
                       ("fp8", "is not one this orl knows"),
                       ({**spec("fp8"), "format": 2}, "quantization format 2 of kind 'fp8' is not supported")):
        (d / "orl.json").write_text(json.dumps({**man, "quantization": bad}))
        with pytest.raises(CheckpointError, match=match):
            load_checkpoint(d)
    (d / "orl.json").write_text(json.dumps(man))
    raw = bytearray((d / "model.safetensors").read_bytes())
    raw[-1] ^= 1
    (d / "model.safetensors").write_bytes(bytes(raw))
    assert "checksum mismatch" in load_error(d)


# ---------------------------------------------------------------- orl quantize

def test_cli_quantize(tmp_path, capsys):
    src = save_checkpoint(tiny(), TOK, tmp_path / "src", manifest={"block_len": 4, "residual_mode": "adapter"})
    assert cli.main(["quantize", "--model", str(src), "--kind", "nvfp4", "--out", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert "nvfp4: weights" in out and "MiB kept in the model dtype" in out
    model, _, manifest = load_checkpoint(tmp_path / "q")
    assert manifest["quantization"]["kind"] == "nvfp4" and manifest["block_len"] == 4
    assert manifest["residual_mode"] == "adapter" and manifest["quantized_from"]["path"] == str(src)
    expected = quantize(load_checkpoint(src)[0], "nvfp4")
    assert torch.equal(logits(model), logits(expected))
    assert cli.main(["quantize", "--model", str(tmp_path / "q"), "--kind", "int8", "--out", str(tmp_path / "x")]) == 2
    assert "is already quantized (nvfp4)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_kinds_match_the_library():
    assert cli_quant.KINDS == KINDS
