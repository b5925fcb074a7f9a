"""The CUDA-graph path's bookkeeping, checked on a CPU with a recording stand-in for graph capture
(tests/test_gpu.py captures real graphs): graphs are keyed by the code they run, never by a
request's numbers (tau, temperature, factor, entropy bound, steps per block, seeds live in device
buffers), prompts are padded to a length bucket so one prefill graph serves many lengths, and after
the first request of a shape a request runs no forward outside a graph replay."""
import dataclasses

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.graph import ChunkRunner, step_key
from orl.engine.request import prefill_length
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


class FakeGraphs:
    """Stands in for CudaGraphs: 'capture' records the function without running it (as capture
    does), 'replay' runs it on the same buffers and writes its result into the output captured once
    (as a graph writes into its captured output tensor)."""

    def __init__(self):
        self.captured: list[str] = []
        self.replaying = False

    def capture(self, fn, st):
        self.captured.append(fn)
        out = torch.zeros((), dtype=torch.bool)

        def replay():
            self.replaying = True
            try:
                r = fn()
            finally:
                self.replaying = False
            if r is not None:
                out.copy_(r)
        return replay, out


def graph_engine(model=None) -> tuple[Engine, FakeGraphs]:
    eng = Engine(model or random_model(vocab_size=TOK.vocab_size, shift_logits=True, eos_bias=2.0), TOK)
    fake = FakeGraphs()
    eng.runner = ChunkRunner(eng.model, eng.ids, fake)
    return eng, fake


def cfg_of(**kw) -> DecodeConfig:
    base = dict(block_len=8, max_new_tokens=21, rule="threshold", threshold=0.5, residual="rcd", chunk_steps=2,
                cuda_graph=True)
    return DecodeConfig(**{**base, **kw})


def fields(g):
    return g.token_ids, g.finished, g.block_steps, g.step_forwards, g.commit_forwards


def test_step_key_holds_the_code_choices_only():
    base = cfg_of()
    same = [dict(threshold=0.7), dict(temperature=0.0), dict(factor=3.0), dict(entropy_bound=0.1), dict(seed=9),
            dict(steps_per_block=3), dict(residual_temperature=0.5), dict(max_new_tokens=5), dict(compile=True)]
    for kw in same:
        assert step_key(dataclasses.replace(base, **kw)) == step_key(base), kw
    other = [dict(rule="factor"), dict(residual="off"), dict(temperature=0.5), dict(eos_fill=False), dict(chunk_steps=1)]
    for kw in other:
        assert step_key(dataclasses.replace(base, **kw)) != step_key(base), kw
    assert step_key(base, fused=True) != step_key(base)
    # sampled steps: one key for every temperature
    assert step_key(cfg_of(temperature=0.3)) == step_key(cfg_of(temperature=1.9))


def test_requests_with_other_numbers_reuse_the_graphs_and_match_eager():
    eng, fake = graph_engine()
    eager = Engine(eng.model, TOK)
    requests = [  # same code path (threshold rule, rcd, sampled), other numbers, seeds and prompt lengths
        (["hello world", "hi"], cfg_of(temperature=0.8, threshold=0.5), [1, 2]),
        (["abc", "a longer one"], cfg_of(temperature=1.3, threshold=0.8, residual_temperature=0.7), [5, 6]),
        (["xy", "z"], cfg_of(temperature=0.5, threshold=0.3, max_new_tokens=13), [7, 8]),
    ]
    counts = []
    for prompts, cfg, seeds in requests:
        got = eng.generate(prompts, cfg, seeds=seeds)
        want = eager.generate(prompts, dataclasses.replace(cfg, cuda_graph=False), seeds=seeds)
        assert [fields(g) for g in got] == [fields(w) for w in want]
        counts.append(eng.runner.captures)
    # prefill (one bucket: 16), the chunk, the fused first chunk of a block: captured once
    assert counts == [3, 3, 3]
    assert max(g.step_forwards for g in got) > len(got[0].block_steps)  # multi-step blocks replayed
    # another code path (greedy) is another pair of step graphs; the prefill graph is shared
    eng.generate(["hi", "ho"], cfg_of())
    assert eng.runner.captures == 5
    # the unfused commit forward is a one-step chunk of its own
    eng.generate(["hi", "ho"], cfg_of(fused_commit=False))
    assert eng.runner.captures == 6


def test_prompt_length_buckets():
    assert [prefill_length(p, 0, 10**6) for p in (1, 16, 17, 24, 25, 33, 49, 65, 97, 129, 200)] == \
        [16, 16, 24, 24, 32, 48, 64, 96, 128, 192, 256]
    assert prefill_length(40, 64, 128) == 48       # fits
    assert prefill_length(50, 65, 128) == 50       # the bucket (64) would not leave room for the answer
    for p in range(1, 300):                          # at most a third of the slots are padding past 16
        b = prefill_length(p, 0, 10**6)
        assert b >= p and (b <= 16 or (b - p) * 3 < b)


def test_bucketed_prefill_changes_no_token():
    """Padding the prompt further to its bucket (the graph path) decodes exactly like the tight prefill,
    across bucket sizes and a batch of different lengths."""
    eng, _ = graph_engine()
    eager = Engine(eng.model, TOK)
    for prompts in (["hi"], ["a prompt of 20 chars"], ["hello world", "x"]):
        for fused in (True, False):
            cfg = cfg_of(fused_commit=fused, chunk_steps=1)
            st_P = eng.setup([TOK.encode(p) for p in prompts], cfg)[1]
            assert st_P == prefill_length(max(len(p) for p in prompts), 24, eng.max_len) > max(map(len, prompts))
            got = eng.generate(prompts, cfg)
            want = eager.generate(prompts, dataclasses.replace(cfg, cuda_graph=False))
            assert [fields(g) for g in got] == [fields(w) for w in want], (prompts, fused)


@pytest.mark.parametrize("fused", [True, False])
def test_graph_path_runs_no_eager_forward(fused):
    eng, fake = graph_engine()
    outside = []
    hook = eng.model.register_forward_pre_hook(lambda m, a: outside.append(not fake.replaying))
    try:
        cfg = cfg_of(fused_commit=fused)
        eng.generate(["hello", "hi"], cfg, seeds=[1, 2])           # first request: captures
        n, outside[:] = eng.runner.captures, []
        g = eng.generate(["a prompt", "b"], dataclasses.replace(cfg, threshold=0.7), seeds=[3, 4])
    finally:
        hook.remove()
    assert eng.runner.captures == n                                   # nothing captured
    assert outside and not any(outside)                               # every forward inside a replay
    assert len(outside) >= 1 + max(x.step_forwards for x in g)        # prefill + the steps


def test_cuda_graph_on_cpu_is_refused():
    eng = Engine(random_model(vocab_size=TOK.vocab_size), TOK)
    with pytest.raises(ValueError, match="CUDA"):
        eng.generate("hi", cfg_of())


def test_evicted_state_drops_its_graphs():
    eng, fake = graph_engine()
    from orl.engine.engine import MAX_STATES

    for L in range(1, MAX_STATES + 2):
        eng.generate("hi", cfg_of(block_len=L, max_new_tokens=L))
    live = {id(s) for s in eng._states.values()}
    assert {k[0] for k in eng.runner._graphs} <= live and {k[0] for k in eng.runner._inputs} <= live
