"""The timers of benchmarks/latency.py: one decoder's requests (Run, Decoder, engine_run) and the
bare block forward a denoising step makes, timed alone in the same mode (bare_forward)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.decode import block_forward


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Run:
    token_ids: list[int]
    forwards: int
    prefill_s: float
    total_s: float


@dataclass
class Decoder:
    name: str
    run: Callable[[], Run]
    mode: str | None = None                      # engine mode of a dlmrt row
    bare: Callable[[], float] | None = None      # one timed batch of bare block forwards -> s per forward
    runs: list[Run] = field(default_factory=list)
    bare_s: list[float] = field(default_factory=list)


def engine_run(engine: Engine, prompt_ids: list[int], cfg: DecodeConfig) -> Callable[[], Run]:
    def run() -> Run:
        g = engine.generate_ids([prompt_ids], cfg)[0]
        return Run(g.token_ids, g.forwards, g.prefill_s, g.total_s)
    return run


def bare_forward(model, tok, prompt_ids: list[int], cfg: DecodeConfig, max_len: int, mode: str,
                 device: torch.device) -> Callable[[], float]:
    """A timer of the model call one denoising step makes, in isolation. The call is captured from
    the engine's own block_forward (a forward pre-hook records its exact arguments), on a private
    engine so timing it cannot disturb the decoders' buffers. Returns () -> seconds per forward."""
    eng = Engine(model, tok, max_len=max_len)
    st, P = eng.setup([prompt_ids], cfg)
    eng.begin_block(st, cfg, P, 0, [True])
    call = {}

    def record(_module, a, kw):
        call["args"], call["kwargs"] = a, kw

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            block_forward(model, st, cfg, eng.ids)
    finally:
        handle.remove()
    a, kw = call["args"], call["kwargs"]

    def plain():
        return model(*a, **kw)

    if mode == "eager":
        fn = plain
    elif mode == "compile":
        compiled = torch.compile(plain, fullgraph=True, dynamic=False)
        fn = compiled
    else:  # cuda_graph: the forward captured once and replayed, as the engine replays its steps
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):
                plain()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            plain()
        fn = graph.replay

    with torch.no_grad():  # warm-up: compilation, allocator, first-call costs
        for _ in range(3):
            fn()
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        one = time.perf_counter() - t
    # batches of ~0.2 s: long enough that one preemption by a neighbour does not decide a round
    n = max(5, min(500, int(0.2 / max(one, 1e-6))))

    def timed() -> float:
        with torch.no_grad():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync(device)
        return (time.perf_counter() - t0) / n
    return timed
