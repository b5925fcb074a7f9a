"""Sharded data parallelism (`parallel="fsdp"`): PyTorch's FSDP2 (`fully_shard`) instead of DDP.

DDP keeps a whole copy of the fp32 weights, their gradients and AdamW's two moments on every process
(16 bytes per parameter, plus DDP's gradient buckets); FSDP2 keeps 1/N of each, all-gathering one
transformer block's weights at a time for its forward and backward and reduce-scattering its
gradients. Each block is its own unit, then the root (embeddings, final norm, head; a tied head is one
tensor with the embedding). With `bf16` the gathered weights are bf16 and gradients are reduced in
fp32 (MixedPrecisionPolicy) over the fp32 master shards.

What stays as it is under DDP: a checkpoint is the same single-file safetensors written by rank 0 (the
full state dict gathered to its CPU), `trainer_state.pt` holds the optimizer state in the one-process
`optimizer.state_dict()` layout (integer ids, full tensors), so a run resumes with any number of
processes under either mode. Clipping needs nothing new: clip_grad_norm_ over the DTensor gradient
shards returns the global norm, replicated on every rank. Evaluation, which only rank 0 runs, happens
inside `gathered`: every rank all-gathers the whole model once, then rank 0 runs forwards that need
no collective. Accumulating over micro-batches without sync keeps every block's unsharded fp32
gradient until the syncing backward (docs/TRAINING.md counts the bytes).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, set_optimizer_state_dict)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

PARALLEL = ("ddp", "fsdp")
FSDP_RECIPES = ("pretrain", "convert")
# gathered on rank 0, in host memory: a 4B model's weights and AdamW moments never sit on one GPU
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class FSDPUnsupported(ValueError):
    pass


def check_parallel(cfg) -> list[str]:
    """The config's `parallel` problems, for its __post_init__."""
    return [] if cfg.parallel in PARALLEL else [f"parallel must be one of {PARALLEL}, got {cfg.parallel!r}"]


def refuse_recipe(recipe: str, keys) -> None:
    """ORL and RCD roll out on each rank's own prompts with the whole model (a different number of
    forwards per rank), which sharded weights - gathered in a collective at every forward - cannot do."""
    if recipe not in FSDP_RECIPES and "parallel" in keys:
        raise FSDPUnsupported(f"parallel: the {recipe} recipe runs under DDP only (its rollouts run a different "
                              f"number of forwards on each process, which FSDP's per-forward all-gathers cannot); "
                              f"parallel=fsdp is for {' and '.join(FSDP_RECIPES)}")


def shard(model: torch.nn.Module, bf16: bool) -> torch.nn.Module:
    """fully_shard every transformer block, then the root, in place (parameter names are unchanged)."""
    mp = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if bf16 else MixedPrecisionPolicy()
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextmanager
def gradient_sync(model: FSDPModule, sync: bool):
    """FSDP2's no_sync: without sync the blocks keep (and accumulate) unsharded gradients, reduced
    once by the backward that syncs."""
    model.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


@contextmanager
def gathered(model: torch.nn.Module):
    """Every rank holds the whole model inside (one all-gather per unit, all ranks together), so one
    rank may run forwards alone; resharded on exit. A no-op for a model that is not sharded."""
    if not is_sharded(model):
        yield
        return
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in units:
        if m is not model:  # the root never reshards after forward (FSDP's own rule for the root)
            m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in units:
            m.reshard()
            if m is not model:
                m.set_reshard_after_forward(True, recurse=False)


def _param_names(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[str]:
    """The name of each of the optimizer's parameters in its order: the integer ids of state_dict()."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for g in opt.param_groups for p in g["params"]]


def full_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[dict | None, dict]:
    """(weights, optimizer state) as one process has them: the sharded model's gathered to rank 0's
    CPU (a collective: every rank calls it; the others get empty dicts), else (None: the model's own
    state_dict, opt.state_dict())."""
    if not is_sharded(model):
        return None, opt.state_dict()
    weights = get_model_state_dict(model, options=FULL)
    osd = get_optimizer_state_dict(model, opt, options=FULL)
    if not osd:
        return weights, osd
    ids = {n: i for i, n in enumerate(_param_names(model, opt))}
    groups = [{**g, "params": [ids[n] for n in g["params"]]} for g in osd["param_groups"]]
    return weights, {"state": {ids[n]: s for n, s in osd["state"].items()}, "param_groups": groups}


def load_optimizer(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    """Load an optimizer state of the one-process layout (full_state's) into `opt`, sharded or not."""
    if not is_sharded(model):
        opt.load_state_dict(state)
        return
    names = _param_names(model, opt)
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    named = {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}
    set_optimizer_state_dict(model, opt, named, options=StateDictOptions(full_state_dict=True))
