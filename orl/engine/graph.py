"""How the engine's forwards are executed: eagerly, under torch.compile, or as CUDA graphs.

All modes run the same functions of orl.engine.decode on the same static buffers. A CUDA graph
captures `chunk_steps` unrolled steps (finished rows are predicated no-ops inside it) and is replayed
with one host check of "block done" between replays. The pinned torch cannot capture
torch.while_loop / torch.cond as conditional graph nodes, so unrolled chunks are the practical design
(DESIGN section 3).

What is captured, each once per state (= batch size, block length and cache length) and `step_key`:
  - chunks of steps; the first chunk of a block with the fused commit forward is its own graph;
  - the commit forward between blocks (unfused path), a chunk of one step;
  - the prefill, one graph per prompt length bucket (orl.engine.request.prefill_length).
So after the first request of a shape, a request on the GPU path runs no eager forward at all.

Graphs are keyed by what changes their code, never by a request's numbers: tau, temperature, factor,
entropy bound, steps per block and seeds live in device buffers (DecodeState.knobs, .seed) that the
graphs read. All graphs share one memory pool. That is safe here because replays are sequential on
one stream and every graph's output (the "done" flag) is read right after its replay, before
another graph may reuse the pool's memory.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import Tensor

from orl.engine.config import DecodeConfig
from orl.engine.decode import DecodeState, SpecialIds, prefill, run_chunk
from orl.model.model import Transformer


def step_key(cfg: DecodeConfig, fused: bool = False) -> tuple:
    """The Python values a chunk's code depends on: everything else it reads is a buffer."""
    return ("chunk", cfg.chunk_steps, cfg.rule, cfg.confidence, cfg.residual, cfg.temperature > 0, cfg.truncated,
            cfg.eos_fill, fused)


def prefill_key(length: int) -> tuple:
    return ("prefill", length)


class CudaGraphs:
    """Captures functions as CUDA graphs on one shared memory pool."""

    def __init__(self):
        self.pool = None

    def capture(self, fn: Callable[[], Tensor | None], st: DecodeState) -> tuple[Callable[[], None], Tensor | None]:
        """-> (replay, output of fn). Two warm-up runs on a side stream first (lazy initialisation
        of kernels and workspaces must not happen during capture); they mutate the state, so it is
        restored before capture. Capture records the work without running it: the caller replays."""
        if st.canvas.device.type != "cuda":
            raise ValueError("cuda_graph=True needs the model on a CUDA device")
        tensors = st.tensors()  # the warm-up runs mutate them: restored before capture
        snapshot = [t.clone() for t in tensors]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        for t, s in zip(tensors, snapshot):
            t.copy_(s)
        del snapshot
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph, pool=self.pool):
            out = fn()
        return graph.replay, out


class ChunkRunner:
    def __init__(self, model: Transformer, ids: SpecialIds, graphs: CudaGraphs | None = None):
        self.model, self.ids = model, ids
        self.graphs = graphs or CudaGraphs()   # tests pass a recording stand-in to check keys on a CPU
        self.captures = 0                       # graphs captured so far (a request that recaptures shows here)
        self._compiled: Callable | None = None
        self._graphs: dict[tuple, tuple[Callable[[], None], Tensor | None]] = {}
        self._inputs: dict[tuple, Tensor] = {}  # static prompt buffers of the prefill graphs

    def __call__(self, st: DecodeState, cfg: DecodeConfig, fused: bool = False) -> Tensor:
        """A chunk of cfg.chunk_steps steps (the first fused with the previous block's commit forward
        when fused); returns the device flag 'every row's block is resolved'."""
        if cfg.cuda_graph:
            return self._replay(st, step_key(cfg, fused), lambda: run_chunk(self.model, st, cfg, self.ids, fused))
        fn = run_chunk
        if cfg.compile:
            if self._compiled is None:
                self._compiled = torch.compile(run_chunk, fullgraph=True, dynamic=False)
            fn = self._compiled
        with torch.no_grad():
            return fn(self.model, st, cfg, self.ids, fused)

    def commit(self, st: DecodeState, cfg: DecodeConfig) -> None:
        """The commit forward of a resolved block (unfused path): one step (a no-op for the state,
        except that the forward writes the block's clean K/V to the cache), not a chunk of
        cfg.chunk_steps forwards."""
        self(st, cfg if cfg.chunk_steps == 1 else dataclasses.replace(cfg, chunk_steps=1))

    def prefill(self, st: DecodeState, tokens: Tensor, cfg: DecodeConfig) -> None:
        """The prompt's forward; captured per prompt length (the engine pads prompts to a bucket
        on the graph path, so a few lengths serve every request)."""
        if not cfg.cuda_graph:
            with torch.no_grad():
                prefill(self.model, st, tokens)
            return
        key = prefill_key(tokens.shape[1])
        if (id(st), key) not in self._inputs:  # the graph reads its prompt from this buffer, by address
            self._inputs[(id(st), key)] = torch.empty_like(tokens)
        buf = self._inputs[(id(st), key)]
        buf.copy_(tokens)
        self._replay(st, key, lambda: prefill(self.model, st, buf))

    def forget(self, st: DecodeState) -> None:
        """Drop the graphs captured on an evicted state's buffers (and their prompt buffers)."""
        for table in (self._graphs, self._inputs):
            for key in [k for k in table if k[0] == id(st)]:
                del table[key]

    def _replay(self, st: DecodeState, key: tuple, fn: Callable[[], Tensor | None]) -> Tensor | None:
        full = (id(st), key)
        if full not in self._graphs:
            self._graphs[full] = self.graphs.capture(fn, st)
            self.captures += 1
        replay, out = self._graphs[full]
        replay()
        return out
