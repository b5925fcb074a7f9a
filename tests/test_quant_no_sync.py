"""A quantized model's denoising step stays free of host syncs (the checks of test_no_sync.py): the
dispatch mode that rejects every host read sees none while run_chunk runs a quantized model, and the
step compiles with fullgraph=True. fp8's native path is forced on the CPU (its _scaled_mm and the
per-token activation scales run there too), so its code is checked here as well."""
import pytest
import torch
from torch import nn

import orl.quant.fp8 as fp8
from orl.engine import Engine
from orl.engine.decode import run_chunk
from orl.quant import linear_paths, quantize
from orl.quant.fp8 import Fp8Linear
from orl.quant.int8 import Int8Linear
from reference_decoder import random_model
from test_no_sync import TOK, NoHostSync, cfg_of, prepared

pytestmark = pytest.mark.usefixtures("one_thread")
FORMS = ["int8", "int8-bf16", "fp8", "fp8-native", "nvfp4"]


def quantized_engine(form: str, monkeypatch) -> Engine:
    kind, _, variant = form.partition("-")
    if variant == "native":
        monkeypatch.setattr(fp8, "on_native_fp8_device", lambda device: True)
    model = random_model(vocab_size=TOK.vocab_size)
    if variant == "bf16":
        model = model.to(torch.bfloat16)
    return Engine(quantize(model, kind), TOK)


@pytest.mark.parametrize("form", FORMS)
def test_quantized_step_has_no_host_sync(form, monkeypatch):
    engine = quantized_engine(form, monkeypatch)
    dtype = engine.model.model.embed_tokens.weight.dtype
    expect = {"int8": "int8:dequantize", "int8-bf16": "int8:int8pack_mm", "fp8": "fp8:emulated",
              "fp8-native": "fp8:native", "nvfp4": "nvfp4:emulated"}[form]
    assert linear_paths(engine.model, dtype) == [expect]
    cfg = cfg_of("threshold", "adapter", temperature=0.8)
    st, _ = prepared(engine, cfg)
    before = int(st.unresolved.sum())
    mode = NoHostSync()
    with torch.no_grad(), mode:
        for _ in range(3):
            run_chunk(engine.model, st, cfg, engine.ids)
    assert int(st.unresolved.sum()) < before
    assert len(mode.ops) > 10


def test_quantized_step_compiles_fullgraph(monkeypatch):
    """One compile for all three kinds (compiling is the slow part): nvfp4 everywhere, then int8 and
    native-path fp8 layers put in by hand."""
    monkeypatch.setattr(fp8, "on_native_fp8_device", lambda device: True)
    engine = quantized_engine("nvfp4", monkeypatch)
    mlp = engine.model.model.layers[0].mlp
    mlp.up_proj = Int8Linear.from_linear(nn.Linear(mlp.up_proj.in_features, mlp.up_proj.out_features, bias=False), "u")
    mlp.down_proj = Fp8Linear.from_linear(nn.Linear(mlp.down_proj.in_features, mlp.down_proj.out_features, bias=False), "d")
    assert linear_paths(engine.model, torch.float32) == ["fp8:native", "int8:dequantize", "nvfp4:emulated"]
    cfg = cfg_of("threshold", "rcd", chunk_steps=1)
    st, _ = prepared(engine, cfg)
    torch._dynamo.reset()
    fn = torch.compile(run_chunk, fullgraph=True, backend="eager")  # dynamo: a host read is a graph break
    with torch.no_grad():
        fn(engine.model, st, cfg, engine.ids)
    torch._dynamo.reset()
