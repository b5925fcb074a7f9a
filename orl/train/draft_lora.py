"""Draft-only runs with a low-rank drafter (`ConvertConfig.draft_rank`): the base's linears plus a trained rank-r
delta on the draft rows (orl.model.draft_delta), LoRA-style, instead of a full second copy.

Why: a full drafter is a second 268M-weight model to train, keep in the optimizer and carry around (a GPU
lease returns 64 MiB a call; gemma-3-270m's drafter is 1.07 GB in fp32, 100.3M of it trained). Rank r on
gemma's 126 linears is about 0.24M x r numbers (rank 16: 3.8M, 15 MB), the optimizer holds only those and the
drafter's norms, and the weight gradients of the big matrices are never formed. The verify rows never see the delta, so the output
stays the base's greedy continuation whatever the rank.

What a checkpoint holds: the merged drafter (W + B A per linear) as an ordinary drafter checkpoint, so every
decoder reads it as it reads a full-copy run (`--draft-rank r` rebuilds the same delta from it by SVD), and the
factors themselves with the drafter's norms in `draft_delta.safetensors`, which a resumed run reads back so that
its optimizer state (Adam moments of A and B) still matches them (an SVD would give other factors of the same
product), and which with the base alone rebuilds the drafter (drafter_from_adapter).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save
from torch import Tensor, nn

from orl.model.draft_delta import DraftDelta, low_rank
from orl.model.row_split import RowSplit

ADAPTER_FILE = "draft_delta.safetensors"
SKIP = ("lm_head",)  # an untied head stays frozen, as the embeddings do (the loss reads the base's)


def deltas(model: nn.Module) -> dict[str, DraftDelta]:
    return {name: m for name, m in model.named_modules() if isinstance(m, DraftDelta)}


def split_linears(model: nn.Module) -> dict[str, RowSplit]:
    """The split linears of a verify_with model that become low-rank units, by module path."""
    return {n: m for n, m in model.named_modules()
            if isinstance(m, RowSplit) and isinstance(m.clean, nn.Linear) and n not in SKIP}


def factor_shapes(model: nn.Module, rank: int) -> dict[str, tuple[int, int]]:
    """{"<unit>.a": (r, in), "<unit>.b": (out, r)} for the units a rank-`rank` drafter has (before or after
    trainable_low_rank made them)."""
    shapes = {}
    for n, m in {**split_linears(model), **deltas(model)}.items():
        out, n_in = m.clean.weight.shape
        r = min(rank, out, n_in)
        shapes[f"{n}.a"], shapes[f"{n}.b"] = (r, n_in), (out, r)
    return shapes


def draft_vectors(model: nn.Module) -> dict[str, nn.Parameter]:
    """The drafter's own vectors in a split model (its norms: the RowSplit units that are neither linears nor
    embeddings), by parameter name: what trains beside the factors."""
    out = {}
    for n, m in model.named_modules():
        if isinstance(m, RowSplit) and not isinstance(m.clean, (nn.Linear, nn.Embedding)):
            out.update({f"{n}.draft.{pn}": p for pn, p in m.draft.named_parameters()})
    return out


def adapter_shapes(model: nn.Module, rank: int) -> dict[str, tuple[int, ...]]:
    """Every tensor a rank-`rank` adapter file holds: the factors and the drafter's vectors."""
    return {**factor_shapes(model, rank), **{n: tuple(p.shape) for n, p in draft_vectors(model).items()}}


def trainable_low_rank(model: nn.Module, rank: int, seed: int, factors: dict[str, Tensor] | None = None) -> dict:
    """In place on a split model (verify_with): every split linear of the blocks becomes a trainable DraftDelta of
    rank `rank`: from `factors` (a resumed run's), else where the drafter already differs from the base (init_from)
    the rank-r SVD of the difference, else as LoRA starts: B = 0 (the drafter is the base) and A ~ N(0, 1 / in)
    (seeded), so that B's first gradients are not zero. Returns {"units", "params", "energy_kept"} (the least
    share of a difference's squared norm the SVD kept: what init_from loses to the rank)."""
    gen = torch.Generator().manual_seed(seed)
    kept, params = [], 0
    for path, unit in sorted(split_linears(model).items()):
        c, d = unit.clean, unit.draft
        if (c.bias is None) != (d.bias is None) or (c.bias is not None and not torch.equal(c.bias, d.bias)):
            raise ValueError(f"draft_rank: {path}'s bias differs between the base and the drafter (init_from "
                             "trained it); a low-rank delta holds no bias: start from a drafter with the base's biases")
        w = c.weight
        if factors is not None:
            a, b = factors[f"{path}.a"], factors[f"{path}.b"]
        elif torch.equal(d.weight, w):
            r = min(rank, *w.shape)
            a = torch.randn(r, w.shape[1], generator=gen) / math.sqrt(w.shape[1])                   # [r, in]
            b = torch.zeros(w.shape[0], r)                                                           # [out, r]
        else:
            a, b, k = low_rank((d.weight - w).detach(), rank)
            kept.append(k)
        unit_parent, name = _parent(model, path)
        lr = DraftDelta(c, a.to(w.dtype).to(w.device), b.to(w.dtype).to(w.device), unit.cut)
        lr.a.requires_grad_(True)
        lr.b.requires_grad_(True)
        setattr(unit_parent, name, lr)
        params += a.numel() + b.numel()
    if factors is not None:  # the drafter's vectors too: with the factors they are the whole drafter
        with torch.no_grad():
            for n, p in draft_vectors(model).items():
                p.copy_(factors[n])
    # what still trains besides the factors must be vectors (the drafter's norms): a split matrix left (a MoE, a
    # residual adapter, a self-conditioning block) would train whole, against what draft_rank asks
    whole = sorted(n for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2
                   and not n.endswith((".a", ".b")))
    if whole:
        raise ValueError(f"draft_rank: {len(whole)} matrices would still train whole (first: {whole[:3]}); "
                         "low-rank drafts cover the blocks' linears only")
    return {"units": len(deltas(model)), "params": params, "energy_kept": min(kept) if kept else 1.0}


def _parent(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    head, _, name = path.rpartition(".")
    return (model.get_submodule(head) if head else model), name


def adapter_bytes(model: nn.Module, rank: int, base_files: str) -> bytes:
    """The factors of every DraftDelta, named by module path, and the drafter's vectors, with the rank and the
    base's files digest (convert_base.base_digest) in the metadata: with that base, all a drafter's tensors are
    (drafter_from_adapter)."""
    tensors = {n: p.detach().float().cpu().contiguous() for n, p in draft_vectors(model).items()}
    for name, m in deltas(model).items():
        tensors[f"{name}.a"] = m.a.detach().float().cpu().contiguous()
        tensors[f"{name}.b"] = m.b.detach().float().cpu().contiguous()
    return save(tensors, metadata={"format": "orl-draft-delta", "rank": str(rank), "base_files_sha256": base_files})


def drafter_from_adapter(base_dir: str | Path, directory: str | Path) -> nn.Module:
    """The drafter a draft_rank run saved (weights only: its manifest is the run's orl.json), rebuilt from the base
    checkpoint it was trained on and the run's adapter file alone: the same tensors as the run's merged checkpoint,
    bit for bit on the machine that merges. What a 15 MB return from a GPU lease needs to become a drafter here.
    A base whose files differ from the ones the run recorded is refused (same shapes would give a wrong drafter)."""
    import copy

    from orl.checkpoint import load_checkpoint
    from orl.model.row_split import drafter_of, verify_with
    from orl.train.convert_base import base_digest, to_diffusion

    meta = adapter_metadata(Path(directory) / ADAPTER_FILE)
    rank = meta.get("rank", "")
    if not rank.isdigit() or int(rank) < 1:
        raise ValueError(f"{Path(directory) / ADAPTER_FILE}: no rank in its metadata ({meta!r})")
    base, _, manifest = load_checkpoint(base_dir, dtype=torch.float32)
    if meta.get("base_files_sha256") != base_digest(base_dir, manifest):
        raise ValueError(f"{base_dir} is not the base {Path(directory) / ADAPTER_FILE} was trained on (its files' "
                         "digest differs from the one the run recorded)")
    teacher = base.requires_grad_(False)
    model = verify_with(to_diffusion(copy.deepcopy(base)).requires_grad_(False), teacher, share_equal=False)
    tensors = read_factors(directory, adapter_shapes(model, int(rank)), int(rank))
    trainable_low_rank(model, int(rank), 0, tensors)
    return drafter_of(model).requires_grad_(False)


def _unreadable(path: Path, e: Exception) -> ValueError:
    return ValueError(f"{path}: not a readable safetensors file ({e})")


def adapter_metadata(path: Path) -> dict[str, str]:
    """The adapter file's metadata, read without its tensors (the library checks the header: its size within the
    file, valid JSON, tensors laid end to end over the body)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return f.metadata() or {}
    except SafetensorError as e:
        raise _unreadable(path, e) from None


def read_factors(directory: str | Path, want: dict[str, tuple[int, ...]], rank: int) -> dict[str, Tensor]:
    """A run's adapter tensors, checked before any tensor is read: a valid header (safetensors' own checks) naming
    exactly the `want` tensors, F32, of those shapes, for this rank; then every value finite. Anything else is a
    ValueError naming the file (a file from another rank or model, or not one orl wrote)."""
    path = Path(directory) / ADAPTER_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != "orl-draft-delta" or meta.get("rank") != str(rank):
                raise ValueError(f"{path} does not fit this run: metadata {meta!r}, expected the factors of "
                                 f"draft_rank {rank}")
            keys = set(f.keys())
            extra, missing = sorted(keys - want.keys()), sorted(want.keys() - keys)
            bad = sorted(k for k in keys & want.keys()
                         if f.get_slice(k).get_dtype() != "F32" or tuple(f.get_slice(k).get_shape()) != want[k])
            if extra or missing or bad:
                raise ValueError(f"{path} does not fit this run (rank {rank}): unknown {extra[:3]}, missing "
                                 f"{missing[:3]}, other dtype or shape {bad[:3]}")
            tensors = {k: f.get_tensor(k) for k in sorted(keys)}
    except SafetensorError as e:
        raise _unreadable(path, e) from None
    nonfinite = [k for k, t in tensors.items() if not torch.isfinite(t).all()]
    if nonfinite:
        raise ValueError(f"{path}: non-finite factors in {nonfinite[:3]}")
    return tensors
