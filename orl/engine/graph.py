"""How a chunk of denoising steps is executed: eagerly, under torch.compile, or as a CUDA graph.

All three run the same `run_chunk` on the same static buffers. A CUDA graph captures `chunk_steps`
unrolled steps (finished rows are predicated no-ops inside it) and is replayed with one host check
of "block done" between replays. The pinned torch cannot capture torch.while_loop / torch.cond as
conditional graph nodes, so unrolled chunks are the practical design (DESIGN section 3).

The commit forward between blocks is an all-resolved step, so it runs here too, as a chunk of one
step: compiled or captured like the denoising steps (with chunk_steps=1 it is the very same graph).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import Tensor

from orl.engine.config import DecodeConfig
from orl.engine.decode import DecodeState, SpecialIds, run_chunk
from orl.model.model import Transformer


def _step_key(cfg: DecodeConfig) -> str:
    # fields the step function reads; the seed and lengths live in device buffers instead
    return repr(dataclasses.replace(cfg, seed=0, max_new_tokens=1, compile=False, cuda_graph=False))


def _state_tensors(st: DecodeState) -> list[Tensor]:
    out = []
    for f in dataclasses.fields(st):
        v = getattr(st, f.name)
        if isinstance(v, Tensor):
            out.append(v)
    return out + [st.cache.k, st.cache.v, st.cache.length]


class ChunkRunner:
    def __init__(self, model: Transformer, ids: SpecialIds):
        self.model, self.ids = model, ids
        self._compiled: Callable | None = None
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, Tensor]] = {}

    def __call__(self, st: DecodeState, cfg: DecodeConfig) -> Tensor:
        if cfg.cuda_graph:
            return self._replay(st, cfg)
        fn = run_chunk
        if cfg.compile:
            if self._compiled is None:
                self._compiled = torch.compile(run_chunk, fullgraph=True, dynamic=False)
            fn = self._compiled
        with torch.no_grad():
            return fn(self.model, st, cfg, self.ids)

    def commit(self, st: DecodeState, cfg: DecodeConfig) -> None:
        """The commit forward of a resolved block: one step (a no-op for the state, except that the
        forward writes the block's clean K/V to the cache), not a chunk of cfg.chunk_steps forwards."""
        self(st, cfg if cfg.chunk_steps == 1 else dataclasses.replace(cfg, chunk_steps=1))

    def forget(self, st: DecodeState) -> None:
        """Drop the graphs captured on an evicted state's buffers."""
        for key in [k for k in self._graphs if k[0] == id(st)]:
            del self._graphs[key]

    def _replay(self, st: DecodeState, cfg: DecodeConfig) -> Tensor:
        if st.canvas.device.type != "cuda":
            raise ValueError("cuda_graph=True needs the model on a CUDA device")
        key = (id(st), _step_key(cfg))
        if key not in self._graphs:
            self._graphs[key] = self._capture(st, cfg)
        graph, done = self._graphs[key]
        graph.replay()
        return done

    def _capture(self, st: DecodeState, cfg: DecodeConfig) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        tensors = _state_tensors(st)
        snapshot = [t.clone() for t in tensors]  # warm-up steps mutate the state; capture must not
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):
                run_chunk(self.model, st, cfg, self.ids)
        torch.cuda.current_stream().wait_stream(side)
        for t, s in zip(tensors, snapshot):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            done = run_chunk(self.model, st, cfg, self.ids)
        return graph, done
