"""The per-request numbers of a decode, as device tensors the step reads (DESIGN section 3).

A captured CUDA graph bakes in every Python value its code read at capture time. If the commit
threshold or the temperature were Python floats inside the step, every request with another value
would need its own graph (and a compiled step its own recompile). So they live here, in 0-d device
tensors that `load` rewrites before each request, and one graph serves every value. What stays a
Python value is what changes the code itself: the rule, the residual mode, greedy vs sampled, EOS fill,
the chunk length and the buffer shapes (`graph.step_key`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from orl.engine.config import DecodeConfig


INTEGER = ("n_steps", "max_post_steps", "num_to_transfer", "small_block_size", "top_k")


@dataclass
class DeviceKnobs:
    threshold: Tensor             # [] float32: threshold rule's tau
    temperature: Tensor           # [] float32: read only by sampled steps (greedy is another graph)
    factor: Tensor                # [] float32: factor rule
    entropy_bound: Tensor         # [] float32: entropy rule
    residual_temperature: Tensor  # [] float32: T_res of the residual context
    n_steps: Tensor               # [] int64: topk rule's steps per block (DecodeConfig.n_steps)
    editing_threshold: Tensor     # [] float32: llada21 rule's T2T threshold
    max_post_steps: Tensor        # [] int64: llada21 rule's edit-only steps after the last mask
    num_to_transfer: Tensor       # [] int64: llada21 rule's least M2T commits per step
    small_block_size: Tensor      # [] int64: fast_dllm_v2 rule's sub-block length
    top_k: Tensor                 # [] int64: sampling's top-k (0: off; read only by truncated steps)
    top_p: Tensor                 # [] float32: sampling's top-p (1: off)

    @classmethod
    def allocate(cls, device) -> "DeviceKnobs":
        def zero(f):
            return torch.zeros((), dtype=torch.long if f.name in INTEGER else torch.float32, device=device)
        return cls(**{f.name: zero(f) for f in fields(cls)})

    def load(self, cfg: DecodeConfig) -> None:
        """Write a request's values (fill_ launches a kernel with a host scalar: no sync, and outside
        any graph, so the next replay reads them)."""
        for f in fields(self):
            value = cfg.n_steps if f.name == "n_steps" else getattr(cfg, f.name)
            getattr(self, f.name).fill_(value)
