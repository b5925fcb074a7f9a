"""int8 on the CPU with bf16 / fp16 activations runs torch._weight_int8pack_mm, whose kernel reads the input
dimension K in blocks of 16: for another K (a residual adapter of width 100, a layer of 24 inputs) it returned
garbage or crashed the process. Such a layer must take the dequantize path."""
import pytest
import torch
from torch import nn

from orl.model import ModelArgs, Transformer
from orl.quant import linear_paths, quantize
from orl.quant.int8 import Int8Linear

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_int8_unaligned_in_features_is_not_sent_to_the_kernel(dtype):
    lin = nn.Linear(24, 8, bias=False)
    with torch.no_grad():  # row n is (n + 1) / 16 everywhere: q = 127, scale = (n + 1) / 16 / 127
        lin.weight.copy_((torch.arange(8.0)[:, None] + 1) / 16 * torch.ones(8, 24))
    q = Int8Linear.from_linear(lin, "model.residual_adapter.down_proj")
    assert q.weight.eq(127).all()
    # checked before any forward: the kernel on K = 24 reads past each row (a crash with one output channel)
    assert q.path_for(dtype) == "dequantize"
    y = q(torch.ones(3, 24, dtype=dtype))
    want = 24 * (torch.arange(8.0) + 1) / 16  # 1.5, 3, ..., 12: exact in bf16 / fp16
    torch.testing.assert_close(y.float(), want.expand(3, 8), rtol=1e-2, atol=0)


def test_aligned_layers_keep_the_kernel():
    q = Int8Linear.from_linear(nn.Linear(32, 8, bias=False), "l")
    assert q.path_for(torch.bfloat16) == "int8pack_mm" and q.path_for(torch.float32) == "dequantize"
    x = torch.randn(3, 32).bfloat16()
    torch.testing.assert_close(q(x).float(), x.float() @ q.dequantize().T, rtol=2e-2, atol=2e-2)


def test_a_model_with_an_unaligned_adapter_runs_int8_in_bf16():
    torch.manual_seed(0)
    args = ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48,
                     max_seq_len=16, adapter_dim=100)
    model = quantize(Transformer(args).eval(), "int8").to(torch.bfloat16)
    assert model.model.residual_adapter.down_proj.path_for(torch.bfloat16) == "dequantize"
    assert linear_paths(model, torch.bfloat16) == ["int8:dequantize", "int8:int8pack_mm"]
