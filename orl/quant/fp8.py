"""FP8 E4M3 weights, one fp32 scale per output channel (DESIGN section 6).

    scale[n] = max_k |W[n, k]| / 448        q = fp8_e4m3(clamp(W / scale, +-448))        W ~ q * scale

Two forwards, and `path` says which one runs:
  native    (CUDA compute capability >= 8.9, K and N multiples of 16): the activations are quantized
            the same way per token (one scale per row, computed on device: no host sync) and
            torch._scaled_mm multiplies FP8 x FP8 on the tensor cores with rowwise scales and bf16
            output (the only output dtype its rowwise kernels have). Activations are quantized too,
            so this path is W8A8: its numbers differ from the emulated path's by the activation rounding.
  emulated  everywhere else: the e4m3 weights (exact in bf16 / fp16 / fp32) are multiplied in the
            activations' dtype and the output scaled per channel (weight-only); float16 activations
            multiply the dequantized weight instead (PerChannelLinear.scaled_matmul: range).
The clamp before every cast matters: a float8 cast of a value beyond 448 is not guaranteed to
saturate on every backend.
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.quant.base import PerChannelLinear, on_native_fp8_device

FP8 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(FP8).max  # 448
MIN_SCALE = torch.finfo(torch.float32).tiny  # a zero row / token keeps a finite, nonzero scale


def quantize_fp8_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """x [M, K] -> (q e4m3 [M, K], scale fp32 [M, 1]): one scale per row, amax maps to 448.
    Weights ([N, K], a row per output channel) and activations ([tokens, K]) both use it."""
    x = x.float()
    scale = (x.abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)
    return q, scale


def quantize_fp8(w: Tensor) -> tuple[Tensor, Tensor]:
    """w [N, K] -> (q e4m3 [N, K], scale fp32 [N])."""
    q, scale = quantize_fp8_rows(w)
    return q, scale[:, 0]


def scaled_mm_rowwise(x: Tensor, q: Tensor, scale: Tensor) -> Tensor:
    """x [M, K] (any float dtype) @ (q * scale)^T via torch._scaled_mm with per-token activation
    scales and per-channel weight scales -> bf16 [M, N]. q [N, K] row-major, so q.t() is the
    column-major operand _scaled_mm wants."""
    xq, x_scale = quantize_fp8_rows(x)
    return torch._scaled_mm(xq, q.t(), scale_a=x_scale, scale_b=scale[None, :], out_dtype=torch.bfloat16)


class Fp8Linear(PerChannelLinear):
    kind = "fp8"
    storage = FP8
    quantize = staticmethod(quantize_fp8)

    def choose_path(self) -> str:
        aligned = self.in_features % 16 == 0 and self.out_features % 16 == 0  # _scaled_mm's alignment
        return "native" if aligned and on_native_fp8_device(self.weight.device) else "emulated"

    def matmul(self, x: Tensor) -> Tensor:
        if self.path == "native":
            y = scaled_mm_rowwise(x.reshape(-1, self.in_features), self.weight, self.weight_scale)
            return y.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return self.scaled_matmul(x)
