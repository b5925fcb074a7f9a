"""int8 weight-only quantization, symmetric, one fp32 scale per output channel (gpt-fast's int8).

    scale[n] = max_k |W[n, k]| / 127        q = round(W / scale) in [-127, 127]        W ~ q * scale

The matmul runs on the exact integers (int8 values are exact in bf16 / fp16 / fp32) and the scale is
applied to the output, which is the same product without an [N, K] multiply per call (float16
activations excepted, whose range the unscaled product overflows: PerChannelLinear.scaled_matmul).
On the CPU, bf16 / fp16 activations go through torch._weight_int8pack_mm where K is a multiple of 16
(measured ~5x faster than a bf16 matmul of the dequantized weight on this repo's CPU); fp32
activations take the dequantize path (there _weight_int8pack_mm measured ~30x slower than the fp32
matmul).
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.quant.base import PerChannelLinear

QMAX = 127
# a zero row gets this scale instead of 0 (its q is 0 either way; no 0/0 anywhere)
MIN_SCALE = torch.finfo(torch.float32).tiny


def quantize_int8(w: Tensor) -> tuple[Tensor, Tensor]:
    """w [N, K] (any float dtype) -> (q int8 [N, K], scale fp32 [N])."""
    w = w.float()
    scale = (w.abs().amax(dim=1) / QMAX).clamp(min=MIN_SCALE)
    q = torch.round(w / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return q, scale


class Int8Linear(PerChannelLinear):
    kind = "int8"
    storage = torch.int8
    quantize = staticmethod(quantize_int8)

    def choose_path(self) -> str:
        # the CPU kernel reads K in blocks of 16 and checks nothing: another K (an adapter of width 100) returned
        # garbage or crashed the process (torch 2.13, tests/test_quant_int8_kernel.py)
        aligned = self.in_features % 16 == 0
        cpu_kernel = aligned and self.weight.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm")
        return "int8pack_mm" if cpu_kernel else "dequantize"

    def path_for(self, dtype: torch.dtype) -> str:
        return self.path if dtype in (torch.bfloat16, torch.float16) else "dequantize"

    def matmul(self, x: Tensor) -> Tensor:
        if self.path_for(x.dtype) == "int8pack_mm":  # the kernel scales before leaving fp32: no float16 overflow
            y = torch._weight_int8pack_mm(x.reshape(-1, self.in_features), self.weight, self.weight_scale.to(x.dtype))
            return y.view(*x.shape[:-1], self.out_features)
        return self.scaled_matmul(x)
