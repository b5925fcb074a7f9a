"""The drafter as the verifier plus a low-rank delta on the draft rows (`low_rank_drafts`), a transform of a
model with a separate verifier (orl.model.row_split).

Why: a batch-1 forward is bound by reading weights, and a full second weight set on the draft rows reads every
split matrix twice. The difference between a drafter and its verifier is what conversion training moved; its
top singular directions (a truncated SVD, as LoRA extraction does) keep most of it, and
W x + B (A x) on the draft rows reads W once plus r (in + out) numbers. The verify rows stay the verifier's
exactly (the delta never touches them), so the output tokens do not change; only the drafts, and with them the
TPF, depend on the rank.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from orl.model.row_split import Cut, RowSplit


class DraftDelta(nn.Module):
    """clean(x) on every row, plus (x A^T) B^T on the rows from cut.at on (none outside a draft forward)."""

    splits_rows = True  # a unit of the split model: its own tensors (A, B) act on draft rows only (row_split)

    def __init__(self, clean: nn.Linear, a: Tensor, b: Tensor, cut: Cut):
        super().__init__()
        self.clean, self.cut = clean, cut
        self.a = nn.Parameter(a, requires_grad=False)    # [r, in]
        self.b = nn.Parameter(b, requires_grad=False)    # [out, r]

    @property
    def weight(self) -> Tensor:
        return self.clean.weight

    def merged_weight(self) -> Tensor:
        """The drafter's weight as a plain linear would hold it: W + B A [out, in] (a new tensor)."""
        w = self.clean.weight
        return (w.float() + self.b.detach().float() @ self.a.detach().float()).to(w.dtype)

    def forward(self, x: Tensor) -> Tensor:
        y = self.clean(x)                                                    # [B, T, out]
        c = self.cut.at
        if c is None or c >= x.shape[1]:
            return y
        c = max(c, 0)  # as RowSplit: a cut at or before row 0 makes every row a draft row
        y[:, c:] += (x[:, c:] @ self.a.T) @ self.b.T                         # [B, T - c, out]
        return y


def low_rank(delta: Tensor, rank: int) -> tuple[Tensor, Tensor, float]:
    """delta [out, in] -> (A [r, in], B [out, r], share of its squared norm kept), r = min(rank, out, in)."""
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, s.numel())
    kept = float((s[:r] ** 2).sum() / (s ** 2).sum().clamp(min=1e-30))
    # row-major copies: LAPACK's factors come column-major, and a factor's layout picks the BLAS path (and with it
    # the rounding), so a resumed run's factors must be laid out as a fresh run's are
    c = torch.contiguous_format
    return vh[:r].clone(memory_format=c), (u[:, :r] * s[:r]).clone(memory_format=c), kept


def low_rank_drafts(model: nn.Module, rank: int) -> dict:
    """In place: every split Linear without a bias difference becomes a DraftDelta of rank `rank` (other split
    units, norms say, stay split: they are vectors). Returns {"units": n, "energy_kept": min share, "params":
    delta parameters}."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    kept, params, n = [], 0, 0

    def swap(parent: nn.Module) -> None:
        nonlocal params, n
        for name, child in list(parent.named_children()):
            if isinstance(child, RowSplit):
                c, d = child.clean, child.draft
                same_bias = isinstance(c, nn.Linear) and (c.bias is None) == (d.bias is None) and (
                    c.bias is None or torch.equal(c.bias, d.bias))
                if isinstance(c, nn.Linear) and same_bias:
                    a, b, k = low_rank((d.weight - c.weight).detach(), rank)
                    setattr(parent, name, DraftDelta(c, a.to(c.weight.dtype), b.to(c.weight.dtype), child.cut))
                    kept.append(k)
                    params += a.numel() + b.numel()
                    n += 1
            else:
                swap(child)

    swap(model)
    return {"units": n, "energy_kept": min(kept) if kept else 1.0, "params": params}
