"""Draft-only runs with a low-rank drafter (`ConvertConfig.draft_rank`): the base's linears plus a trained
rank-r delta on the draft rows (orl.model.draft_delta), LoRA-style, instead of a full second copy.

Why: a full drafter is a second 268M-weight model to train, keep in the optimizer and carry around (a GPU
lease returns 64 MiB a call; gemma-3-270m's drafter is 536 MB in fp32). Rank r on gemma's 126 linears is about
0.24M x r numbers (rank 16: 3.8M, 15 MB), the optimizer holds only those and the drafter's norms, and the
weight gradients of the big matrices are never formed. The verify rows never see the delta, so the output
stays the base's greedy continuation whatever the rank.

What a checkpoint holds: the merged drafter (W + B A per linear) as an ordinary drafter checkpoint, so every
decoder reads it as it reads a full-copy run (`--draft-rank r` rebuilds the same delta from it by SVD), and
the factors themselves in `draft_delta.safetensors`, which a resumed run reads back so that its optimizer state
(Adam moments of A and B) still matches them; an SVD would give other factors of the same product.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load, save
from torch import nn

from orl.model.draft_delta import DraftDelta, low_rank_drafts

ADAPTER_FILE = "draft_delta.safetensors"


def deltas(model: nn.Module) -> dict[str, DraftDelta]:
    return {name: m for name, m in model.named_modules() if isinstance(m, DraftDelta)}


def trainable_low_rank(model: nn.Module, rank: int, seed: int) -> dict:
    """In place on a split model (verify_with): every split linear of the blocks becomes a trainable DraftDelta
    of rank `rank`.
    Where the drafter already differs from the base (init_from, a resumed run) the delta starts as its rank-r SVD;
    where it does not, as LoRA starts: B = 0 (the drafter equals the base) and A ~ N(0, 1 / in) (seeded), so
    that B's first gradients are not zero. Returns low_rank_drafts' summary."""
    info = low_rank_drafts(model, rank, skip=("lm_head",))  # an untied head stays frozen, as the embeddings do
    gen = torch.Generator().manual_seed(seed)
    for name, m in sorted(deltas(model).items()):
        if not m.b.detach().any():
            r, n_in = m.a.shape
            a = torch.randn(r, n_in, generator=gen) / math.sqrt(n_in)                     # [r, in]
            m.a.data = a.to(m.a.dtype).to(m.a.device)
        m.a.requires_grad_(True)
        m.b.requires_grad_(True)
    return info


def adapter_bytes(model: nn.Module, rank: int) -> bytes:
    """The factors of every DraftDelta, named by module path, with the rank in the metadata."""
    tensors = {}
    for name, m in deltas(model).items():
        tensors[f"{name}.a"] = m.a.detach().float().cpu().contiguous()
        tensors[f"{name}.b"] = m.b.detach().float().cpu().contiguous()
    return save(tensors, metadata={"format": "orl-draft-delta", "rank": str(rank)})


def load_adapter(model: nn.Module, directory: str | Path, rank: int) -> bool:
    """A resumed run's factors from its checkpoint into the DraftDelta units (False when the file is absent).
    Every name and shape must match the model's units: a file from another rank or model is refused."""
    path = Path(directory) / ADAPTER_FILE
    if not path.exists():
        return False
    data = path.read_bytes()
    # the header is JSON; check its sizes against the units before any tensor is allocated
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError(f"{path}: header of {n} bytes in a {len(data)}-byte file")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    units = deltas(model)
    want = {f"{p}.{k}": tuple(getattr(m, k).shape) for p, m in units.items() for k in ("a", "b")}
    got = {k: tuple(v["shape"]) for k, v in header.items()}
    if meta.get("rank") != str(rank) or got != want:
        extra, missing = sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys())
        wrong = sorted(k for k in got.keys() & want.keys() if got[k] != want[k])
        raise ValueError(f"{path} does not fit this run (rank {meta.get('rank')} for draft_rank {rank}; "
                         f"unknown {extra[:3]}, missing {missing[:3]}, other shapes {wrong[:3]})")
    tensors = load(data)
    with torch.no_grad():
        for p, m in units.items():
            m.a.copy_(tensors[f"{p}.a"])
            m.b.copy_(tensors[f"{p}.b"])
    return True
