"""Data-parallel training under torchrun: one process per device, PyTorch DDP (or FSDP2, `parallel=
"fsdp"`: orl.train.fsdp) for the gradients.

`orl train` needs no flag: launched by torchrun (RANK / WORLD_SIZE / LOCAL_RANK in the environment)
a recipe joins the process group - nccl on CUDA, one GPU per LOCAL_RANK, gloo on CPU - and wraps the
model in DistributedDataParallel (or shards it); launched plainly it runs as one process, as before.
Every rank builds the same global batch (batches are pure functions of seed and step) and trains on
its share of the rows, so a run matches the single-process run up to the order of floating-point sums.
Rank 0 alone checks and writes the output directory, the log and the console.
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as tdist
from torch import Tensor

from orl.train import fsdp
from orl.train.batches import Batch

# rank 0 evaluates held-out accuracy and writes checkpoints while the others wait in the next step's
# collective; the default timeouts (10 min with nccl) would kill a long eval of a large model
TIMEOUT = timedelta(hours=2)
MAX_ERROR_BYTES = 2000  # of a failing rank's error message, told to the other ranks


class RankFailed(RuntimeError):
    """Another rank failed where every rank works on its own (reading the base, the corpus, a
    checkpoint) or rank 0 alone (the output checks, the corpus build, evaluation, checkpoint writes)."""


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    launched: bool = False  # under torchrun: a process group exists (even with one process)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int) -> range:
        """This rank's contiguous share of n items (the first ranks get the smaller shares)."""
        return range(self.rank * n // self.world, (self.rank + 1) * n // self.world)

    def wrap(self, model: torch.nn.Module, find_unused: bool = False, parallel: str = "ddp",
             bf16: bool = False) -> torch.nn.Module:
        """DDP around `model` (its parameters are broadcast from rank 0); the model itself otherwise.
        find_unused: some parameters get no gradient in this recipe (an adapter the run does not use).
        parallel="fsdp": `model` sharded in place (fsdp.shard, bf16 gathers with `bf16`) and returned;
        build the optimizer after this, on the sharded parameters."""
        if not self.launched:
            return model
        if parallel == "fsdp":
            return fsdp.shard(model, bf16)
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)

    def no_sync(self, model: torch.nn.Module, skip: bool):
        """Accumulate gradients locally (skip=True) until the last micro-batch's backward syncs them."""
        if fsdp.is_sharded(model):
            return fsdp.gradient_sync(model, not skip)
        return model.no_sync() if skip and hasattr(model, "no_sync") else nullcontext()

    def all_sum(self, x: Tensor) -> Tensor:
        """Sum over ranks (one collective); x unchanged in a single process."""
        if not self.launched:
            return x
        y = x.detach().to(self.device, torch.float64 if x.is_floating_point() else torch.long).clone()
        tdist.all_reduce(y)
        return y.to(x.device, x.dtype)

    def barrier(self) -> None:
        if self.launched:
            tdist.barrier()

    def on_main(self, fn):
        """fn() on rank 0 only, the others waiting; its result on rank 0 (None elsewhere). If it raises,
        every rank raises (none hangs)."""
        return self.on_every(lambda: fn() if self.main else None)

    def on_every(self, fn):
        """fn() on every rank, its result; if it raises on any rank, every rank raises. A rank that fails
        alone (a file its node does not see) would otherwise leave the others waiting in their next
        collective for the process group's TIMEOUT (2 hours): nccl does not notice a peer that has
        gone, and on another node a peer that stays. fn must run no collective itself."""
        err = out = None
        try:
            out = fn()
        except Exception as e:  # re-raised below, after the others have heard of it
            err = e
        self._stop_together(err)
        return out

    def _stop_together(self, err: Exception | None) -> None:
        """Every rank learns whether one failed (one collective); a failing rank raises its own error,
        the others RankFailed naming the first failing rank and its error (four more collectives)."""
        if not self.launched:
            if err is not None:
                raise err
            return
        if not self.all_sum(torch.tensor([err is not None], dtype=torch.long)).item():
            return
        said = "" if err is None else f"{type(err).__name__}: {err}"
        told = self.gather_lists([list(said.encode(errors="replace")[:MAX_ERROR_BYTES])])
        if err is not None:
            raise err
        rank, text = next((r, bytes(t).decode(errors="replace")) for r, t in enumerate(told) if t)
        raise RankFailed(f"rank {rank} failed: {text}; this rank (rank {self.rank}) stops too")

    def gather_lists(self, seqs: list[list[int]]) -> list[list[int]]:
        """Every rank's lists of ints, concatenated in rank order (the single-process order)."""
        if not self.launched:
            return seqs
        lens = self._gather(torch.tensor([len(s) for s in seqs], dtype=torch.long))
        flat = self._gather(torch.tensor([t for s in seqs for t in s], dtype=torch.long))
        return [chunk.tolist() for n, f in zip(lens, flat) for chunk in torch.split(f, n.tolist())]

    def _gather(self, x: Tensor) -> list[Tensor]:
        """all_gather of 1-D long tensors of different lengths: padded to the longest, returned per rank."""
        size = torch.tensor([x.numel()], device=self.device)
        sizes_all = [torch.zeros_like(size) for _ in range(self.world)]
        tdist.all_gather(sizes_all, size)
        longest = max(int(s) for s in sizes_all)
        buf = torch.zeros(longest, dtype=torch.long, device=self.device)
        buf[: x.numel()] = x.to(self.device)
        parts = [torch.empty_like(buf) for _ in range(self.world)]
        tdist.all_gather(parts, buf)
        return [p[: int(s)].cpu() for p, s in zip(parts, sizes_all)]


SINGLE = Dist()


def _env_int(name: str) -> int:
    value = os.environ.get(name, "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer (set by torchrun; unset it to run one process)") from None


def setup(device: str | None = None) -> Dist:
    """The run's place in a torchrun job, joining the process group once; one process when not launched.
    device (`orl train --device`): a single process's device, None for the CPU (a run resumed on a GPU
    host stays where it started unless asked; one process on a GPU needs no process group, no NCCL);
    under torchrun each process takes the CUDA device of its LOCAL_RANK when CUDA is available, unless
    device is "cpu" (gloo)."""
    from orl.device import resolve_device

    if "WORLD_SIZE" not in os.environ:
        dev = resolve_device(device or "cpu")
        if dev.type == "cuda" and dev.index is not None:
            torch.cuda.set_device(dev)  # graphs, allocator and memory stats on the GPU asked for, not GPU 0
        return Dist(device=dev)
    rank, world, local = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside WORLD_SIZE={world}")
    want = None if device is None else resolve_device(device).type
    if want not in (None, "cpu", "cuda"):
        raise ValueError(f"--device {device}: under torchrun the processes run on cpu (gloo) or cuda (nccl)")
    device = torch.device("cpu")
    if torch.cuda.is_available() and want != "cpu":
        if local >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={local} but only {torch.cuda.device_count()} CUDA devices are visible; "
                             "start at most that many processes per node")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not tdist.is_initialized():
        tdist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT,
                                 **({"device_id": device} if device.type == "cuda" else {}))
        atexit.register(leave_group)
    return Dist(rank, world, local, device, launched=True)


def leave_group() -> None:
    """Free the run's objects, then leave the process group; at exit, while the interpreter is whole.
    FSDP2 modules sit in reference cycles (their hooks), so a finished run's model, its sharded
    parameters and the gloo work that last touched them outlive the recipe, and without a collection
    they are torn down during interpreter finalization, after the group is gone: a CI run's rank
    aborted there ('terminate called without an active exception', SIGABRT) once training was done.
    An exception that ended the run (--debug) keeps its frames, the model among them, in sys.last_*."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    if tdist.is_initialized():
        tdist.destroy_process_group()


def shard_rows(batch: Batch, d: Dist) -> Batch:
    """Rows rank::world of a batch built whole (so padding and layout match the single process), on
    this rank's device. A rank with no rows gets row 0 at weight 0: every rank must run the same
    forwards and backwards for DDP, and a zero weight adds nothing to the gradient."""
    if d.world == 1:
        rows, weight = slice(None), batch.weight
    else:
        rows = torch.arange(d.rank, batch.tokens.shape[0], d.world)
        weight = batch.weight[rows]
        if not rows.numel():
            rows, weight = torch.zeros(1, dtype=torch.long), torch.zeros_like(batch.weight[:1])
    to = lambda x: None if x is None else x.to(d.device)  # noqa: E731
    return Batch(to(batch.tokens[rows]), to(batch.pos[rows]), to(batch.mask[rows]), to(batch.targets[rows]),
                 to(weight), to(batch.read_from))
