"""The vocabulary head: a bias-free Linear [V, D] whose fp32 CPU forward of a few rows picks the faster of two
equal products.

Why: for a head of 262,144 x 640 (gemma-3-270m; 168M of its 268M weights) the CPU BLAS in torch's build runs
h W^T in fp32 for 2-6 rows 2-4x slower than W h^T (3 rows: ~200 ms against ~50 ms on one core; 1 row and >= 8
rows the two are equal or h W^T wins; in bf16 / fp16 h W^T is the faster: `python benchmarks/head_kernel.py
[--dtype bfloat16]`). Those row counts are the hot path of self-speculative and block decoding: a fused
round's k + 1 verify rows, a block of 4. The product is the same up to summation order (~1e-6 here); the GPU,
the half dtypes and every other shape keep F.linear.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SKINNY_ROWS = (2, 6)  # the row counts where W h^T won on the machines measured (benchmarks/head_kernel.py)
SKINNY_MIN_VOCAB = 32_768  # below it the head is small and either product is fast


class VocabHead(nn.Linear):
    def __init__(self, dim: int, vocab_size: int):
        super().__init__(dim, vocab_size, bias=False)

    def forward(self, h: Tensor) -> Tensor:                                     # h [..., D]
        rows = h.numel() // h.shape[-1]
        lo, hi = SKINNY_ROWS
        if (h.device.type == "cpu" and lo <= rows <= hi and self.out_features >= SKINNY_MIN_VOCAB
                and h.dtype == self.weight.dtype == torch.float32):
            # contiguous: the transposed product would leave every later read of a row strided
            return (self.weight @ h.reshape(rows, -1).T).T.contiguous().reshape(*h.shape[:-1], -1)   # [..., V]
        return F.linear(h, self.weight)
