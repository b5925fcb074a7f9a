"""The gated MLP every layer (and every expert) uses: down(act(gate(x)) * up(x))."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")  # transformers' gelu_pytorch_tanh


ACTIVATIONS = {"silu": F.silu, "gelu_tanh": gelu_tanh}


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str = "silu"):
        super().__init__()
        self.act = ACTIVATIONS[act]
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
