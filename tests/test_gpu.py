"""dlmrt on a CUDA device (run by benchmarks/gpu_check.sh; `pytest -m gpu`). The whole module is
skipped without CUDA, so it imports and reports "skipped" on a CPU machine.

- A captured CUDA graph of k unrolled steps (DecodeConfig(cuda_graph=True, chunk_steps=k), k = 1, 4),
  replayed with one host check per chunk, produces the same tokens, per-block steps and forward
  counts as the eager loop, for every commit rule and residual mode, greedy and sampled, across a
  left-padded batch; one graph serves every block and later requests (other prompt lengths).
  Capture itself proves the loop has no host sync: a sync inside torch.cuda.graph raises.
- Graphs are keyed by code, not numbers: requests with other thresholds, temperatures, factors and
  seeds replay the graphs captured for the first one (captures counted), prompts are padded to a
  length bucket whose prefill graph serves them, and a later request runs no eager forward.
- The fused commit forward (default) and the separate one give the same tokens under graphs.
- torch.compile of the step on the GPU (inductor, Triton kernels) gives the eager tokens.
- A bf16 model decodes (eager and CUDA graph agree, no banned or out-of-range token, finite
  confidences).
"""
import dataclasses

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOK = CharTokenizer()
V = TOK.vocab_size
RULES = {  # settings that give multi-step blocks on the random model (as in test_engine.py)
    "threshold": dict(threshold=0.5),
    "topk": dict(steps_per_block=3),
    "factor": dict(factor=1.5),
    "entropy": dict(entropy_bound=1.0),
    # LLaDA2.1 token editing: blocks stay open for edit-only steps after their last mask
    "llada21": dict(threshold=0.5, editing_threshold=0.2, max_post_steps=3, confidence="sampled_prob"),
}
PROMPTS = ["hello world", "hi"]  # different lengths: the batch is left padded


def cfg_of(rule="threshold", residual="off", **kw) -> DecodeConfig:
    # 21 tokens in blocks of 8: a short last block, and a commit forward between blocks
    return DecodeConfig(block_len=8, max_new_tokens=21, rule=rule, residual=residual, **{**RULES[rule], **kw})


def fields(g):
    return g.token_ids, g.finished, g.block_steps, g.step_forwards, g.commit_forwards


def first_mismatch(a, b) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if fields(x) != fields(y):
            return f"row {i}: {fields(x)} != {fields(y)}"
    return ""


@pytest.fixture(scope="module")
def model():
    return random_model(vocab_size=V).cuda()


@pytest.mark.parametrize("chunk", [1, 4])
@pytest.mark.parametrize("residual", ["off", "rcd", "adapter"])
@pytest.mark.parametrize("rule", list(RULES))
def test_cuda_graph_matches_eager(model, rule, residual, chunk):
    cfg = cfg_of(rule, residual, chunk_steps=chunk)
    eager = Engine(model, TOK).generate(PROMPTS, cfg)
    graph_engine = Engine(model, TOK)
    graphed = graph_engine.generate(PROMPTS, dataclasses.replace(cfg, cuda_graph=True))
    assert not first_mismatch(eager, graphed), first_mismatch(eager, graphed)
    assert max(g.step_forwards for g in eager) > len(eager[0].block_steps)  # multi-step blocks
    # a chunk of k steps replays k steps: extra ones on a resolved block are no-ops, so eager with
    # chunk 1 gives the same result too
    if chunk != 1:
        one = Engine(model, TOK).generate(PROMPTS, dataclasses.replace(cfg, chunk_steps=1))
        assert not first_mismatch(one, graphed), first_mismatch(one, graphed)
    # one prefill graph (one bucket), one chunk graph for every block, one for the fused first chunk
    assert graph_engine.runner.captures == 3


@pytest.mark.parametrize("chunk", [1, 4])
def test_cuda_graph_sampling_matches_eager(model, chunk):
    cfg = cfg_of("threshold", "rcd", temperature=0.8, chunk_steps=chunk)
    seeds = [3, 4]
    eager = Engine(model, TOK).generate(PROMPTS, cfg, seeds=seeds)
    graphed = Engine(model, TOK).generate(PROMPTS, dataclasses.replace(cfg, cuda_graph=True), seeds=seeds)
    assert not first_mismatch(eager, graphed), first_mismatch(eager, graphed)


def test_one_graph_serves_later_requests(model):
    """Positions, cache lengths, seeds and the rule's numbers are device buffers: a new request with
    other prompt lengths (same bucket), another factor, temperature and seeds replays the graphs
    captured for the first one, runs no eager forward, and still matches eager."""
    cfg = dataclasses.replace(cfg_of("factor", "rcd", temperature=0.7), cuda_graph=True, chunk_steps=4)
    eng, ref = Engine(model, TOK), Engine(model, TOK)
    requests = [(PROMPTS, cfg), (["a longer one", "x"], dataclasses.replace(cfg, factor=2.5, temperature=1.2, seed=4)),
                (["hi", "hello"], dataclasses.replace(cfg, factor=0.8, temperature=0.4, seed=9))]
    for i, (prompts, c) in enumerate(requests):
        calls = []
        hook = model.register_forward_pre_hook(lambda m, a: calls.append(1))
        try:
            got = eng.generate(prompts, c)
        finally:
            hook.remove()
        want = ref.generate(prompts, dataclasses.replace(c, cuda_graph=False))
        assert not first_mismatch(want, got), (prompts, first_mismatch(want, got))
        if i:  # replays run no Python forward: the hook never fires
            assert not calls
    assert eng.runner.captures == 3  # prefill (bucket 16), the 4-step chunk, the fused first chunk


@pytest.mark.parametrize("fused", [True, False])
def test_fused_commit_under_graphs(model, fused):
    cfg = dataclasses.replace(cfg_of("threshold", "adapter", fused_commit=fused), cuda_graph=True, chunk_steps=2)
    eager = Engine(model, TOK).generate(PROMPTS, dataclasses.replace(cfg, cuda_graph=False, fused_commit=not fused))
    graphed = Engine(model, TOK).generate(PROMPTS, cfg)
    for e, g in zip(eager, graphed):
        assert (e.token_ids, e.block_steps) == (g.token_ids, g.block_steps)
        assert g.forwards == e.forwards + (-e.commit_forwards if fused else g.commit_forwards)


def test_prefill_buckets_under_graphs(model):
    """Prompts of 3 to 40 tokens: four buckets, four prefill graphs, the eager tokens."""
    cfg = dataclasses.replace(cfg_of("threshold", "off"), cuda_graph=True)
    eng, ref = Engine(model, TOK), Engine(model, TOK)
    for n in (3, 11, 20, 30, 40, 7):
        prompts = ["ab" * (n // 2) + "c" * (n % 2), "q"]
        got = eng.generate(prompts, cfg)
        want = ref.generate(prompts, dataclasses.replace(cfg, cuda_graph=False))
        assert not first_mismatch(want, got), (n, first_mismatch(want, got))
    assert sum(k[1][0] == "prefill" for k in eng.runner._graphs) == 4  # 16, 24, 32, 48


def test_compile_on_gpu_matches_eager():
    # one layer keeps inductor's cold compile (Triton kernels) short
    m = random_model(vocab_size=V, n_layers=1).cuda()
    cfg = cfg_of("threshold", "rcd")
    eager = Engine(m, TOK).generate(PROMPTS, cfg)
    compiled = Engine(m, TOK).generate(PROMPTS, dataclasses.replace(cfg, compile=True))
    assert not first_mismatch(eager, compiled), first_mismatch(eager, compiled)
    assert max(g.step_forwards for g in eager) > len(eager[0].block_steps)


def test_self_speculative_on_cuda_is_the_ar_paths_tokens():
    """The shipped base on CUDA: both self-drafters (two forwards a round, and fused into one with its
    scratch slots past the request, also with 3 of its groups) emit plain AR decoding's tokens, with fewer forwards
    when fused."""
    from pathlib import Path

    from orl.checkpoint import load_checkpoint
    from orl.engine.ar import ARConfig, ARDecoder

    model, tok, manifest = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "orl-tiny-base",
                                           device="cuda")
    dec = ARDecoder(model, tok, manifest=manifest)
    prompts = ["cumsum:877347649366134=", "sort:j5,e4,a3,b4,d3,h2,i3=", "echo a=7;c=a+1;a=c+6;b=2+a:"]
    for p in prompts:
        plain = dec.generate([p], ARConfig(max_new_tokens=40))[0]
        two = dec.generate([p], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="diffusion"))[0]
        fused = dec.generate([p], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="fused"))[0]
        few = dec.generate([p], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="fused", spec_groups=3))[0]
        assert two.token_ids == plain.token_ids == fused.token_ids == few.token_ids, p
        assert fused.step_forwards <= two.step_forwards, p
