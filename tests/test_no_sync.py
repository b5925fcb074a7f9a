"""The per-block loop of dlmrt is free of host syncs (DESIGN section 3): run_chunk compiles with
fullgraph=True (a .item(), .tolist() or a Python branch on a tensor would be a graph break), and a
dispatch mode that rejects every op that reads a tensor value back to the host sees none while
run_chunk runs several steps, for every commit rule, residual mode, greedy and sampled. Both checks
are shown to fail on a step with an injected sync. What the step reads but no longer computes (the
per-block mask / positions / slots written by prepare_block) is covered too: prepare_block passes
the same two checks, and the steps run across a block switch without a sync or a recompile."""
import contextlib
import copy
import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import orl.engine.decode as decode
from orl.engine import DecodeConfig, Engine
from orl.engine.decode import prepare_block, run_chunk
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
aten = torch.ops.aten
RULES = {"threshold": dict(threshold=0.5), "topk": dict(steps_per_block=3), "factor": dict(factor=1.5),
         "entropy": dict(entropy_bound=1.0),
         # the published decoders (test_published_decoders.py), each with another ranking score
         "dream": dict(steps_per_block=3, confidence="margin"), "sdar_static": dict(steps_per_block=3, confidence="sampled_prob"),
         "sdar_dynamic": dict(steps_per_block=3, threshold=0.5, confidence="neg_entropy"),
         "dream_origin": dict(steps_per_block=3, confidence="random"),
         # LLaDA2.1 token editing and Fast-dLLM v2 sub-blocks (test_edit_subblock_decoders.py)
         # (with top_k / top_p: sampled steps read the truncated distribution)
         "llada21": dict(threshold=0.5, editing_threshold=0.1, max_post_steps=2, confidence="sampled_prob",
                         top_k=5, top_p=0.9),
         "fast_dllm_v2": dict(threshold=0.5, small_block_size=4, confidence="sampled_prob", top_p=0.8)}


class HostSync(RuntimeError):
    pass


class NoHostSync(TorchDispatchMode):
    """Raises on ops whose result is a host value read from a tensor (or a data-dependent shape)."""

    BANNED = {aten._local_scalar_dense, aten.item, aten.nonzero, aten.is_nonzero, aten.equal,
              aten.masked_select, aten.unique_consecutive, aten._unique2,
              # torch.tensor(host data) inside the step: on an accelerator a host-to-device copy that
              # PyTorch follows with a stream sync, and that CUDA graph capture rejects
              aten.lift_fresh}

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops.add(func.overloadpacket)
        if func.overloadpacket in self.BANNED:
            raise HostSync(f"host sync inside the decode loop: {func}")
        if func.overloadpacket in (aten._to_copy, aten.copy_) and isinstance(args[0], torch.Tensor):
            # copies between host and device (only possible on an accelerator)
            dst = kwargs.get("device") if func.overloadpacket is aten._to_copy else args[0].device
            src = args[0].device if func.overloadpacket is aten._to_copy else args[1].device
            if dst is not None and (torch.device(dst).type == "cpu") != (src.type == "cpu"):
                raise HostSync(f"host/device copy inside the decode loop: {func}")
        return func(*args, **kwargs)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def engine():
    return Engine(random_model(vocab_size=TOK.vocab_size), TOK)


def cfg_of(rule, residual, temperature=0.0, chunk_steps=3) -> DecodeConfig:
    return DecodeConfig(block_len=8, max_new_tokens=21, rule=rule, residual=residual, temperature=temperature,
                        chunk_steps=chunk_steps, **RULES[rule])


def prepared(engine, cfg, prompts=("hi", "hello world")):
    """A state at the start of answer block 0, set up by the engine's own code."""
    st, P = engine.setup([TOK.encode(p) for p in prompts], cfg)
    engine.begin_block(st, cfg, P, 0, [True] * len(prompts))
    return st, P


def state_tensors(st) -> dict:
    out = {f.name: getattr(st, f.name) for f in dataclasses.fields(st) if isinstance(getattr(st, f.name), torch.Tensor)}
    out.update(cache_k=st.cache.k, cache_v=st.cache.v)
    return out


def assert_same_state(a, b):
    ta, tb = state_tensors(a), state_tensors(b)
    for k in ta:
        torch.testing.assert_close(ta[k], tb[k], msg=lambda m, k=k: f"{k}: {m}", atol=1e-5, rtol=1e-5)


def test_setup_and_begin_block_are_what_the_engine_runs(engine):
    cfg = cfg_of("threshold", "rcd")
    st, _ = prepared(engine, cfg)
    with torch.no_grad():
        while st.unresolved.any():
            run_chunk(engine.model, st, cfg, engine.ids)
    first = st.canvas.tolist()
    steps = st.steps.tolist()
    gens = engine.generate(["hi", "hello world"], cfg)
    for b, g in enumerate(gens):
        assert g.block_steps[0] == steps[b]
        assert g.token_ids[:8] == first[b][: len(g.token_ids[:8])]


# ---------------------------------------------------------------- (b) dispatch mode

@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("residual", ["off", "rcd", "adapter"])
@pytest.mark.parametrize("rule", list(RULES))
def test_run_chunk_has_no_host_sync(engine, rule, residual, temperature):
    cfg = cfg_of(rule, residual, temperature)
    st, P = prepared(engine, cfg)
    mode = NoHostSync()
    for j in (0, 1):  # two blocks: the steps of block 1 read the per-block buffers prepare_block rewrote
        if j:  # host work between blocks (not the loop); block 1 starts with the fused commit forward
            engine.begin_block(st, cfg, P, j, [True, True], fused=True)
            assert int(st.slots[0]) == P + cfg.block_len and int(st.fslots[0]) == P
        before = int(st.unresolved.sum())
        with torch.no_grad(), mode:
            for i in range(4):          # 12 steps: the block resolves, then no-op / commit-forward steps
                done = run_chunk(engine.model, st, cfg, engine.ids, fused=j == 1 and i == 0)
        assert int(st.unresolved.sum()) < before and bool(done)
        assert int(st.steps.min()) >= 1
    assert mode.ops, "the dispatch mode saw no op: it would prove nothing"
    assert len(mode.ops) > 10 and any("attention" in str(op) for op in mode.ops)


def test_prepare_block_has_no_host_sync(engine):
    """The per-block buffers are written between chunks, outside a captured graph; building them
    from device metadata still needs no host value (no sync to drain the queue between blocks)."""
    cfg = cfg_of("threshold", "rcd")
    st, P = prepared(engine, cfg)
    st.start.fill_(P + cfg.block_len)
    mode = NoHostSync()
    with mode:
        prepare_block(st)
    assert aten.copy_ in mode.ops
    torch._dynamo.reset()
    torch.compile(prepare_block, fullgraph=True, backend="eager")(st)
    torch._dynamo.reset()


# ---------------------------------------------------------------- (a) fullgraph compile

@pytest.mark.parametrize("rule,residual,temperature,fused", [
    ("threshold", "rcd", 0.0, True), ("topk", "adapter", 0.8, True), ("factor", "off", 0.8, False),
    ("entropy", "rcd", 0.0, False), ("dream", "off", 0.8, True), ("sdar_dynamic", "rcd", 0.0, False),
    ("llada21", "off", 0.8, True), ("fast_dllm_v2", "rcd", 0.0, False)])
def test_run_chunk_compiles_fullgraph_and_matches_eager(engine, rule, residual, temperature, fused):
    cfg = cfg_of(rule, residual, temperature, chunk_steps=1)
    st, P = prepared(engine, cfg)
    eager_st, compiled_st = copy.deepcopy(st), copy.deepcopy(st)
    torch._dynamo.reset()
    # aot_eager: dynamo (where a sync would be a graph break, an error under fullgraph) plus AOTAutograd's
    # functionalisation of the in-place state updates; test_engine.py::test_compile_matches_eager runs
    # the same function through inductor inside the engine
    fn = torch.compile(run_chunk, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        for j in (0, 1, 2) if fused else (0, 1):
            if j:  # the next block: new buffer contents, same compiled code (it reads them as inputs);
                # fused: blocks 1 and 2 start with the fused commit forward (its own compiled variant)
                for s in (eager_st, compiled_st):
                    engine.begin_block(s, cfg, P, j, [True, True], fused=fused)
            for i in range(4):
                first = fused and j > 0 and i == 0
                d_eager = run_chunk(engine.model, eager_st, cfg, engine.ids, first)
                with torch.compiler.set_stance("fail_on_recompile") if j == 2 or (j and not fused) else contextlib.nullcontext():
                    d_comp = fn(engine.model, compiled_st, cfg, engine.ids, first)
                assert bool(d_eager) == bool(d_comp)
                assert_same_state(eager_st, compiled_st)
    assert not torch.equal(eager_st.canvas, st.canvas)  # it did decode


def test_request_numbers_are_step_inputs_not_constants(engine):
    """tau, temperature, factor, the entropy bound, the topk steps and T_res live in st.knobs: a compiled
    step (like a captured graph) serves every value without recompiling, and reads the new values."""
    for rule in RULES:
        torch._dynamo.reset()  # one compile per rule: ten rules would pass dynamo's cache limit of 8
        fn = torch.compile(run_chunk, fullgraph=True, backend="eager")
        base = dataclasses.replace(cfg_of(rule, "rcd", temperature=0.8, chunk_steps=1), seed=3)
        other = dataclasses.replace(base, threshold=0.2, temperature=1.7, factor=3.0, entropy_bound=0.2,
                                    steps_per_block=2, residual_temperature=0.5, editing_threshold=0.6,
                                    max_post_steps=1, num_to_transfer=2, small_block_size=2,
                                    top_k=3 if base.top_k else 0, top_p=0.6 if base.top_p < 1 else 1.0)
        outs = []
        for i, cfg in enumerate((base, other)):
            st, _ = prepared(engine, cfg)
            eager_st = copy.deepcopy(st)
            with torch.no_grad(), (torch.compiler.set_stance("fail_on_recompile") if i else contextlib.nullcontext()):
                fn(engine.model, st, base, engine.ids)  # the first request's cfg: only the code choice counts
            with torch.no_grad():
                run_chunk(engine.model, eager_st, cfg, engine.ids)
            assert_same_state(st, eager_st)
            outs.append((st.canvas.clone(), st.z.clone()))
        assert not (torch.equal(*[o[0] for o in outs]) and torch.equal(*[o[1] for o in outs])), rule
    torch._dynamo.reset()


# ---------------------------------------------------------------- the checks can fail

SYNCS = {
    "bool": lambda t: bool(t.any()),      # a Python branch on a tensor value
    "item": lambda t: t.sum().item() >= 0,
    "tolist": lambda t: len(t.tolist()) >= 0,
}


def syncing_commit(orig, kind="bool"):
    def commit_positions(cfg, conf, entropy, candidates, step, n_valid, knobs=None):
        if SYNCS[kind](candidates):
            return orig(cfg, conf, entropy, candidates, step, n_valid, knobs)
        return candidates
    return commit_positions


def test_dispatch_mode_catches_syncs(engine, monkeypatch):
    with pytest.raises(HostSync):
        with NoHostSync():
            torch.arange(3).sum().item()
    with pytest.raises(HostSync):
        with NoHostSync():
            torch.arange(3).nonzero()
    with pytest.raises(HostSync):
        with NoHostSync():
            torch.tensor([1, 2]) + 1               # host data made into a tensor inside the loop
    # .tolist() reads memory without dispatching an op, so the mode cannot see it: the fullgraph
    # compile test and the source check below cover it
    cfg = cfg_of("threshold", "rcd")
    st, _ = prepared(engine, cfg)
    monkeypatch.setattr(decode, "commit_positions", syncing_commit(decode.commit_positions))
    with pytest.raises(HostSync):
        with torch.no_grad(), NoHostSync():
            run_chunk(engine.model, st, cfg, engine.ids)


@pytest.mark.parametrize("kind", list(SYNCS))
def test_fullgraph_compile_catches_syncs(engine, monkeypatch, kind):
    cfg = cfg_of("threshold", "off", chunk_steps=1)
    st, _ = prepared(engine, cfg)
    monkeypatch.setattr(decode, "commit_positions", syncing_commit(decode.commit_positions, kind))
    torch._dynamo.reset()
    fn = torch.compile(run_chunk, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="(?i)data.dependent|graph.break|tolist"):
        with torch.no_grad():
            fn(engine.model, st, cfg, engine.ids)
    torch._dynamo.reset()


def test_step_sources_read_no_tensor_values():
    """Belt and braces for what the dispatch mode cannot see (.tolist(), .numpy()): no call of a
    host-reading tensor method anywhere in the step code (docstrings and comments aside)."""
    import ast
    import inspect

    import orl.engine.commit as commit
    import orl.engine.sampling as sampling
    import orl.model.vocab as vocab

    host = {"item", "tolist", "cpu", "numpy", "nonzero", "synchronize"}
    for mod in (decode, commit, sampling, vocab):
        calls = [n.func.attr for n in ast.walk(ast.parse(inspect.getsource(mod)))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        assert calls and not host & set(calls), f"{mod.__name__} calls {sorted(host & set(calls))}"
