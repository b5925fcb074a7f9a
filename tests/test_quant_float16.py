"""Per-channel quantized layers (int8, fp8) with float16 activations: the product of the stored integers / e4m3
values is up to 127 / 448 times the weight's, which float16 (max 65504) overflows long before the true output
does, and a small row's scale (max / 448) is a float16 subnormal. Expected values are computed by hand."""
import pytest
import torch
from torch import nn

from orl.quant.fp8 import Fp8Linear
from orl.quant.int8 import Int8Linear

pytestmark = pytest.mark.usefixtures("one_thread")
F16 = torch.float16


def constant_linear(value: float, in_features: int = 16, out_features: int = 2) -> nn.Linear:
    lin = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        lin.weight.fill_(value)
    return lin


def test_fp8_emulated_float16_does_not_overflow():
    # W = 1/16 everywhere: scale = (1/16) / 448, q = 448; y = 16 * 10 * (1/16) = 10, exact in float16,
    # while the unscaled product 16 * 10 * 448 = 71680 is past float16's 65504
    q = Fp8Linear.from_linear(constant_linear(0.0625), "l")
    assert q.path == "emulated" and q.weight.float().eq(448).all()
    y = q(torch.full((3, 16), 10.0, dtype=F16))
    assert y.dtype == F16
    assert y.tolist() == [[10.0, 10.0]] * 3


def test_fp8_emulated_float16_keeps_small_rows_exact():
    # W = 2^-13 (a normal float16): q = 448, scale = 2^-13 / 448 ~ 2.7e-7, a float16 subnormal (steps of 2^-24)
    # that rounds to 5 * 2^-24 (+9%); y = 16 * 2^-13 = 2^-9, exact in float16
    q = Fp8Linear.from_linear(constant_linear(2.0**-13), "l")
    y = q(torch.ones(1, 16, dtype=F16))
    assert y.tolist() == [[2.0**-9, 2.0**-9]]


def test_int8_dequantize_path_float16_does_not_overflow():
    # the path an int8 layer takes off the CPU (choose_path: no int8pack_mm kernel there); W = 1/16: q = 127,
    # y = 16 * 40 * (1/16) = 40, while the unscaled product 16 * 40 * 127 = 81280 overflows float16
    q = Int8Linear.from_linear(constant_linear(0.0625), "l")
    q.path = "dequantize"
    assert q.path_for(F16) == "dequantize"
    y = q(torch.full((2, 16), 40.0, dtype=F16))
    assert y.tolist() == [[40.0, 40.0]] * 2


@pytest.mark.parametrize("cls", [Fp8Linear, Int8Linear])
def test_bf16_and_fp32_keep_the_scale_on_the_output(cls):
    # the other dtypes are unchanged: matmul on the stored values, the per-channel scale on the output
    lin = nn.Linear(32, 8, bias=False)
    q = cls.from_linear(lin, "l")
    q.path = "emulated" if cls is Fp8Linear else "dequantize"
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(3, 32).to(dtype)
        want = torch.nn.functional.linear(x, q.weight.to(dtype)) * q.weight_scale.to(dtype)
        assert torch.equal(q(x), want)
