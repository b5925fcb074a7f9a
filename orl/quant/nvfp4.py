"""NVFP4 weights: blocks of 16 E2M1 values, one E4M3 scale per block, one fp32 scale per tensor.

E2M1 holds {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit (code = sign << 3 | magnitude index); two codes
are packed per byte, the even element in the low nibble. For a weight W [N, K] (K a multiple of 16):

    global  g    = max |W| / (448 * 6)                 so the largest block scale lands on 448
    block   s_b  = e4m3(clamp(max_b |W| / 6 / g, 2^-6, 448))
    values  q    = e2m1(clamp(W * ((1 / g) / s_b), -6, 6))        round to nearest, ties to even
    W ~ q * (g * s_b)

Every operation, its order and its rounding follow torchao's reference (torchao 0.18,
prototype/mx_formats/nvfp4_tensor.py: nvfp4_quantize with per_tensor_amax_to_scale, NVFP4Tensor
.dequantize), so quantize and dequantize are bit-exact against it (tests/test_quant_nvfp4.py checks
that when torchao is installed). One deliberate difference: a tensor whose max |W| is 0 (or so small
that 1 / g overflows) gets g = 1, where torchao divides by zero and returns NaN scales; its values then
round to (signed) zeros. Block scales below 2^-6 are clamped to 2^-6 (torchao's E4M3_EPS, the smallest
normal e4m3), so a block far smaller than the tensor's largest one loses its small values, as there.

No native FP4 kernel runs here: the forward dequantizes to the activations' dtype and multiplies
(`path` = "emulated", on every device; FP4 tensor cores need Blackwell and a kernel this module does
not have yet).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from orl.quant.base import QuantizationError, QuantLinear

BLOCK = 16
FP8 = torch.float8_e4m3fn
E2M1_MAX = 6.0
E4M3_MAX = torch.finfo(FP8).max          # 448
E4M3_MIN_SCALE = torch.finfo(FP8).tiny   # 2^-6
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# code -> value, the sign bit giving -0.0 for code 8 (as torchao's bit-level decode does)
E2M1_TABLE = E2M1_VALUES + tuple(-v for v in E2M1_VALUES)
# rounding thresholds between consecutive magnitudes; at a tie the even code wins, so the threshold
# itself rounds up (>=) when the upper code is even and down (>) when it is odd
_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def e2m1_encode(x: Tensor) -> Tensor:
    """fp32 values already within [-6, 6] -> uint8 codes 0..15 (round to nearest, ties to even)."""
    a = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for t, tie_up in _THRESHOLDS:
        code += (a >= t if tie_up else a > t).to(torch.uint8)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def e2m1_decode(codes: Tensor, table: Tensor | None = None) -> Tensor:
    if table is None:
        table = torch.tensor(E2M1_TABLE, dtype=torch.float32, device=codes.device)
    return table[codes.long()]


def pack_nibbles(codes: Tensor) -> Tensor:
    """[..., K] codes -> [..., K / 2] bytes: element 2i in the low nibble, 2i + 1 in the high one."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: Tensor) -> Tensor:
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


def global_scale(w: Tensor) -> Tensor:
    """fp32 scalar g = max |w| / (448 * 6); 1 where that has no finite reciprocal (an all-zero tensor)."""
    g = w.float().abs().amax() / (E4M3_MAX * E2M1_MAX)
    return torch.where(torch.isfinite(1.0 / g), g, torch.ones_like(g))


def nvfp4_quantize(w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """w [N, K] (fp32 / bf16 / fp16, finite, K % 16 == 0) ->
    (packed uint8 [N, K / 2], block scales e4m3 [N, K / 16], global scale fp32 [])."""
    N, K = w.shape
    if K % BLOCK:
        raise QuantizationError(f"nvfp4 needs the input dimension to be a multiple of {BLOCK}, got {K}")
    g = global_scale(w)
    x = w.float().reshape(N, K // BLOCK, BLOCK)
    block = x.abs().amax(dim=-1) / E2M1_MAX
    scale = (block / g).clamp(min=E4M3_MIN_SCALE, max=E4M3_MAX).to(FP8)
    reciprocal = (1.0 / g) / scale.float()   # torchao multiplies by this reciprocal: same rounding
    scaled = (x * reciprocal[..., None]).clamp(-E2M1_MAX, E2M1_MAX)
    return pack_nibbles(e2m1_encode(scaled.reshape(N, K))), scale, g


def nvfp4_dequantize(packed: Tensor, scale: Tensor, g: Tensor, dtype: torch.dtype = torch.float32,
                     table: Tensor | None = None) -> Tensor:
    N, K = packed.shape[0], packed.shape[1] * 2
    values = e2m1_decode(unpack_nibbles(packed), table).view(N, K // BLOCK, BLOCK)
    return (values * (g * scale.float())[..., None]).view(N, K).to(dtype)


class NVFP4Linear(QuantLinear):
    kind = "nvfp4"
    weight: Tensor               # uint8 [N, K / 2]: two e2m1 codes per byte
    weight_scale: Tensor         # float8_e4m3fn [N, K / 16]
    weight_global_scale: Tensor  # fp32 []

    def __init__(self, in_features: int, out_features: int, buffers: dict[str, Tensor], bias: Tensor | None = None):
        super().__init__(in_features, out_features, buffers, bias)
        # not saved: a constant, kept as a buffer so that it moves with the module and the forward
        # builds no tensor from host data (a host-to-device copy inside the decode loop); never on the
        # meta device, where a model is built for loading and nothing would fill it in
        device = "cpu" if self.weight.is_meta else self.weight.device
        self.register_buffer("e2m1_table", torch.tensor(E2M1_TABLE, device=device), persistent=False)

    @classmethod
    def check_shape(cls, shape: torch.Size, name: str) -> None:
        if shape[1] % BLOCK:
            raise QuantizationError(f"{name}: nvfp4 needs in_features to be a multiple of {BLOCK}, got {shape[1]}")

    @classmethod
    def quantize_weight(cls, w: Tensor) -> dict[str, Tensor]:
        packed, scale, g = nvfp4_quantize(w)
        return {"weight": packed, "weight_scale": scale, "weight_global_scale": g}

    @classmethod
    def empty_buffers(cls, out_features: int, in_features: int, device) -> dict[str, Tensor]:
        return {"weight": torch.empty(out_features, in_features // 2, dtype=torch.uint8, device=device),
                "weight_scale": torch.empty(out_features, in_features // BLOCK, dtype=FP8, device=device),
                "weight_global_scale": torch.empty((), dtype=torch.float32, device=device)}

    def dequantize(self, dtype: torch.dtype = torch.float32) -> Tensor:
        return nvfp4_dequantize(self.weight, self.weight_scale, self.weight_global_scale, dtype, self.e2m1_table)

    def choose_path(self) -> str:
        return "emulated"

    def matmul(self, x: Tensor) -> Tensor:
        return F.linear(x, self.dequantize(x.dtype))
