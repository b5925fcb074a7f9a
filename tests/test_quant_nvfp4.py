"""NVFP4 (orl/quant/nvfp4.py): bit-exact against torchao's reference where torchao is installed (the
`dev` extra), plus checks that need no reference: the E2M1 grid and its ties, the nibble order, the
scale ranges, and the inputs torchao itself does not define (all-zero tensors) or that are refused."""
import pytest
import torch
from torch import nn

from orl.quant import NonFiniteWeightError, QuantizationError
from orl.quant.nvfp4 import (E2M1_VALUES, NVFP4Linear, e2m1_decode, e2m1_encode, nvfp4_dequantize, nvfp4_quantize,
                             pack_nibbles, unpack_nibbles)

FP8 = torch.float8_e4m3fn


def bits(t: torch.Tensor) -> torch.Tensor:
    """Compare bit patterns: torch.equal calls -0.0 and 0.0 equal, and float8 has no eq kernel."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def extreme_cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    cases = {
        "normal": torch.randn(48, 128, generator=g),
        "bf16": torch.randn(32, 64, generator=g).bfloat16(),
        "huge": torch.randn(8, 64, generator=g) * 1e30,
        "tiny": torch.randn(8, 64, generator=g) * 1e-30,
    }
    # a block of zeros (block scale clamps to 2^-6) and a block of fp32 subnormals beside normal blocks
    w = torch.randn(4, 64, generator=g)
    w[0, :16] = 0
    w[1, 16:32] = torch.randn(16, generator=g) * 1e-40
    w[2, 32:48] = -0.0
    cases["zero and subnormal blocks"] = w
    # the tensor's largest block gets scale 448; a block 1e6 x smaller clamps to 2^-6 and loses its values
    w = torch.randn(4, 32, generator=g)
    w[0, 3] = 1000.0
    w[3, 16:] *= 1e-6
    cases["+-448 and clamped block scales"] = w
    # one large value per block: the others round to small codes or zero
    w = torch.randn(8, 64, generator=g) * 1e-3
    w[:, ::16] = torch.tensor([50.0, -50.0]).repeat(4)[:w.shape[0], None]
    cases["single large value per block"] = w
    # exact ties: amax 2688 gives g = 1 and the second block's max 6 gives block scale 1, so these
    # values reach the rounding step unchanged
    ties = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, -0.0]
    cases["ties"] = torch.tensor([[2688.0] + [0.0] * 15 + ties])
    return cases


CASES = extreme_cases()


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_against_torchao(name):
    ref = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor", reason="torchao not installed (dev extra)")
    w = CASES[name]
    t = ref.NVFP4Tensor.to_nvfp4(w, per_tensor_scale=ref.per_tensor_amax_to_scale(w.abs().max()),
                                 is_swizzled_scales=False)
    packed, scale, g = nvfp4_quantize(w)
    assert torch.equal(bits(packed), bits(t.qdata)), "packed e2m1 codes differ"
    assert torch.equal(bits(scale), bits(t.scale)), "e4m3 block scales differ"
    assert torch.equal(bits(g), bits(t.per_tensor_scale)), "global scale differs"
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(bits(nvfp4_dequantize(packed, scale, g, dtype)), bits(t.dequantize(dtype))), dtype


def test_ties_round_to_even_and_the_grid():
    packed, scale, g = nvfp4_quantize(CASES["ties"])
    assert float(g) == 1.0 and scale.float().tolist() == [[448.0, 1.0]]
    got = nvfp4_dequantize(packed, scale, g)[0, 16:]
    want = [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0, -0.0]
    assert got.tolist() == want
    assert torch.equal(torch.signbit(got), torch.tensor([v < 0 or str(v) == "-0.0" for v in want]))
    # every code decodes to its grid value and encodes back to itself
    codes = torch.arange(16, dtype=torch.uint8)
    values = e2m1_decode(codes)
    assert values[:8].tolist() == list(E2M1_VALUES) and values[8:].tolist() == [-v for v in E2M1_VALUES]
    assert torch.equal(e2m1_encode(values), codes)


def test_nibble_order_low_is_even():
    codes = torch.tensor([[1, 2, 3, 4]], dtype=torch.uint8)
    assert pack_nibbles(codes).tolist() == [[0x21, 0x43]]
    assert torch.equal(unpack_nibbles(pack_nibbles(codes)), codes)


def test_error_within_half_a_step_of_each_block():
    w = CASES["normal"]
    packed, scale, g = nvfp4_quantize(w)
    step = (g * scale.float())[..., None]  # value of one unit of E2M1 in each block
    err = (nvfp4_dequantize(packed, scale, g) - w).view(*scale.shape, 16).abs()
    # the grid's widest gap is 2 units (4 -> 6): the error never exceeds half of it
    assert bool((err <= step * 1.0 + 1e-12).all())
    assert scale.float().max() == 448.0  # the largest block uses the full e4m3 range


def test_all_zero_and_underflowing_tensors_give_zeros():
    """torchao divides by a zero global scale here (NaN scales); orl uses g = 1 and exact zeros."""
    for w in (torch.zeros(4, 32), torch.full((4, 32), 1e-40), torch.full((2, 16), -0.0)):
        packed, scale, g = nvfp4_quantize(w)
        assert float(g) == 1.0 and bool(torch.isfinite(scale.float()).all())
        assert bool((nvfp4_dequantize(packed, scale, g) == 0).all())


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_weights_are_refused_by_name(bad):
    lin = nn.Linear(32, 8, bias=False)
    with torch.no_grad():
        lin.weight[3, 5] = bad
    with pytest.raises(NonFiniteWeightError, match=r"layers\.0\.mlp\.up_proj\.weight holds inf or nan"):
        NVFP4Linear.from_linear(lin, "model.layers.0.mlp.up_proj")


def test_in_features_must_be_a_multiple_of_16():
    with pytest.raises(QuantizationError, match=r"o_proj: nvfp4 needs in_features to be a multiple of 16, got 24"):
        NVFP4Linear.from_linear(nn.Linear(24, 16, bias=False), "o_proj")


def test_linear_forward_is_the_dequantized_matmul():
    lin = nn.Linear(64, 32, bias=False)
    q = NVFP4Linear.from_linear(lin, "x")
    x = torch.randn(3, 5, 64)
    assert q.path == "emulated"
    torch.testing.assert_close(q(x), x @ q.dequantize().T)
    assert q.weight_bytes() == 32 * 32 + 32 * 4 + 4  # 4.5 bits per weight plus one fp32
