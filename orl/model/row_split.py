"""Two weight sets in one forward, split by row: the clean rows run one model's weights, the draft rows another's.

Why: self-speculative decoding (orl.engine.self_draft) emits exactly the AR path of the weights that score the
clean (verify) rows, and its speed is how many of the draft rows' tokens that path accepts. Converting a
pretrained AR model into a block-diffusion drafter moves its AR path (issue 22: gemma-3-270m's next-block match
fell from 27/128 to 17/128 after 300 steps), so the converted weights verify worse than the original. With the
original's weights on the clean rows and the converted weights on the draft rows, the output is the original's
greedy continuation token for token, and the converted weights only decide the speed. The draft rows attend
to the clean rows' K/V, which the original computes; clean rows never attend to draft rows (fused_verify's
mask), so nothing the drafter computes reaches the output tokens.

A transform applied to a plain model, as quantization is: `verify_with(drafter, verifier)` replaces each
weight-holding unit (Linear, Embedding, RMSNorm, and a MoE / residual adapter / self-conditioning block
whole) of the drafter by a RowSplit of the two models' units. Every unit sees its activations as [B, T, ...]
with the rows (query positions) in dim 1, so a split at row `cut` is a slice and a concatenation, and the
FLOPs are one model's. Which row starts the draft rows is a Python int the caller sets for one forward
(`draft_rows_from`); outside it every row is a clean row, so a prefill writes the verifier's K/V.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import fields

import torch
from torch import Tensor, nn

from orl.model.model import SelfConditioning, Transformer
from orl.model.moe import MoE
from orl.model.residual import ResidualAdapter, RMSNorm

UNITS = (nn.Linear, nn.Embedding, RMSNorm, MoE, ResidualAdapter, SelfConditioning)
# the only ModelArgs field the two may differ in: the conversion turns the shifted read-out on, which changes
# nothing in an AR forward (position i's logits predict token i + 1 either way)
MAY_DIFFER = {"shift_logits"}


class Cut:
    """Where the draft rows start in the current forward: None (all rows clean) outside draft_rows_from."""

    def __init__(self):
        self.at: int | None = None


class RowSplit(nn.Module):
    """clean(x[:, :cut]) and draft(x[:, cut:]) concatenated along the rows; clean(x) when no cut is set."""

    def __init__(self, clean: nn.Module, draft: nn.Module, cut: Cut):
        super().__init__()
        self.clean, self.draft, self.cut = clean, draft, cut

    @property
    def weight(self) -> Tensor:
        # what the model reads off a unit directly (the embedding's dtype, the cache's device) is the clean one's
        return self.clean.weight

    def forward(self, x: Tensor, *args, **kwargs) -> Tensor:
        c = self.cut.at
        if c is None or c >= x.shape[1]:
            return self.clean(x, *args, **kwargs)
        if c <= 0:
            return self.draft(x, *args, **kwargs)

        def part(s: slice):
            a = [t[:, s] if isinstance(t, Tensor) else t for t in args]
            kw = {k: t[:, s] if isinstance(t, Tensor) else t for k, t in kwargs.items()}
            return x[:, s], a, kw

        x0, a0, k0 = part(slice(None, c))
        x1, a1, k1 = part(slice(c, None))
        return torch.cat([self.clean(x0, *a0, **k0), self.draft(x1, *a1, **k1)], 1)


class RowSplitError(ValueError):
    """Two models that cannot share a forward row by row (the message names the difference)."""


def check_compatible(drafter: Transformer, verifier: Transformer) -> None:
    """Same architecture up to MAY_DIFFER, and the same parameter shapes, or a RowSplitError naming the first
    difference (a verifier of another size or vocabulary would silently index garbage)."""
    for f in fields(drafter.args):
        if f.name in MAY_DIFFER:
            continue
        a, b = getattr(drafter.args, f.name), getattr(verifier.args, f.name)
        if a != b:
            raise RowSplitError(f"the verifier's model_args.{f.name} is {b!r}, the drafter's {a!r}: the two must be "
                                "the same architecture (a conversion of the verifier)")

    def tensors(m):
        return {**dict(m.named_parameters(remove_duplicate=False)), **dict(m.named_buffers(remove_duplicate=False))}

    mine, theirs = tensors(drafter), tensors(verifier)
    for name in sorted(mine.keys() | theirs.keys()):
        p, q = mine.get(name), theirs.get(name)
        if p is None or q is None or p.shape != q.shape:
            raise RowSplitError(f"tensor {name}: drafter {None if p is None else tuple(p.shape)}, verifier "
                                f"{None if q is None else tuple(q.shape)} (a quantized model on one side only?)")
        if p.dtype != q.dtype or p.device != q.device:
            raise RowSplitError(f"tensor {name}: drafter {p.dtype} on {p.device}, verifier {q.dtype} on {q.device}: "
                                "load both in one dtype, on one device")


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def verify_with(drafter: Transformer, verifier: Transformer, share_equal: bool = True) -> Transformer:
    """The drafter (a block-diffusion conversion of `verifier`) with `verifier`'s weights on the clean rows;
    in place, returned. The verifier's tied head stays tied. share_equal: a unit whose weights the two hold
    equal (frozen embeddings, and with them a tied head: most of a 262k-vocabulary model) is the verifier's
    alone, read once a forward; a training run (orl.train.draft_only) keeps every unit split, since equal
    weights there are only a starting point."""
    if has_verifier(drafter):
        raise RowSplitError("this model already has a verifier (verify_with was applied to it)")
    if getattr(drafter, "row_cut", None) is not None:  # orl.model.draft_vocab's cut: its head copy is the drafter's
        raise RowSplitError("draft_vocab was applied to this model: apply verify_with first, then draft_vocab")
    check_compatible(drafter, verifier)
    cut = Cut()
    theirs = dict(verifier.named_modules())

    def swap(parent: nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            path = f"{prefix}{name}"
            if isinstance(child, UNITS):
                shared = share_equal and same_weights(theirs[path], child)
                setattr(parent, name, theirs[path] if shared else RowSplit(theirs[path], child, cut))
            else:
                swap(child, path + ".")

    swap(drafter, "")
    check_outside_units(drafter, verifier)
    drafter.row_cut = cut
    drafter.verifier_attached = True
    return drafter


def outside_units(model: nn.Module, path: str = ""):
    """(module path, module, tensor name, tensor) for every parameter or buffer a module owns outside the units
    (split, shared, or not yet swapped): attention's logn_scale, a block's layer_scalar, a quantized linear's
    buffers. They run on every row, clean ones included."""
    if isinstance(model, (RowSplit,) + UNITS) or getattr(model, "splits_rows", False):  # or a DraftDelta
        return
    for name, t in [*model.named_parameters(recurse=False), *model.named_buffers(recurse=False)]:
        yield path, model, name, t
    for name, child in model.named_children():
        yield from outside_units(child, f"{path}.{name}" if path else name)


def check_outside_units(drafter: nn.Module, verifier: nn.Module) -> None:
    """What outside_units yields must be the verifier's values, or the verify rows would not be the verifier's."""
    theirs = dict(verifier.named_modules())
    for path, m, name, t in outside_units(drafter):
        if not torch.equal(t, getattr(theirs[path], name)):
            raise RowSplitError(f"{path + '.' if path else ''}{name} ({type(m).__name__}) differs between drafter and "
                                "verifier, and runs on the clean rows too (outside the split units): it must be the "
                                "verifier's")


def has_verifier(model: nn.Module) -> bool:
    # not row_cut alone: orl.model.draft_vocab gives a model without a verifier a cut of its own
    return getattr(model, "verifier_attached", False)


@contextmanager
def draft_rows_from(model: nn.Module, row: int):
    """Within the block, rows >= `row` of the model's forwards are draft rows: the drafter's weights (verify_with)
    and the draft vocabulary (orl.model.draft_vocab); a no-op for a model with neither."""
    cut = getattr(model, "row_cut", None)
    if cut is None:
        yield
        return
    outer, cut.at = cut.at, row
    try:
        yield
    finally:
        cut.at = outer


def drafter_of(model: Transformer) -> Transformer:
    """The drafter alone (a plain Transformer sharing the draft units' tensors, nothing copied, except a low-rank
    unit's merged weight W + B A): what a draft-only training run saves, since the verifier is its base
    checkpoint unchanged."""
    if not has_verifier(model):
        return model
    # detached tensors (same storage): load_state_dict(assign=True) would set requires_grad on the model's own
    # parameters, unfreezing what a run froze
    low_rank = {p: m for p, m in model.named_modules() if getattr(m, "splits_rows", False)}  # DraftDelta units
    factors = {f"{p}.{k}" for p in low_rank for k in ("a", "b")}
    state = {k.replace(".draft.", "."): v for k, v in model.state_dict().items()
             if ".clean." not in k and k not in factors}
    for p, m in low_rank.items():  # a low-rank drafter saves as a plain one: W + B A (new tensors), the base's bias
        state[f"{p}.weight"] = m.merged_weight()
        if m.clean.bias is not None:
            state[f"{p}.bias"] = m.clean.bias.detach()
    with torch.device("meta"):
        out = Transformer(model.args)
    if model.args.tie_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    out.load_state_dict(state, strict=True, assign=True)
    if model.args.tie_embeddings:
        out.lm_head.weight = out.model.embed_tokens.weight
    return out.train(model.training)


def head_weight(model: nn.Module, draft: bool) -> Tensor:
    """The read-out matrix the draft rows (draft=True) or the clean rows run: each side's own head under
    verify_with, the one head otherwise."""
    head = getattr(model, "module", model).lm_head
    return (head.draft if draft else head.clean).weight if isinstance(head, RowSplit) else head.weight


def params_outside_units(model: nn.Module) -> list[nn.Parameter]:
    """The parameters a split model runs on every row (outside_units): a draft-only run freezes them, since
    training them would move the verify rows."""
    return [t for _, _, _, t in outside_units(model) if isinstance(t, nn.Parameter)]
