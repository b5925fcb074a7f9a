"""dlmrt against a cache-free reference decoder, and the engine's request-level contract (DESIGN
sections 3 and 5): every commit rule x residual mode token for token, batching, traces, EOS,
max_new_tokens, forward counting / TPF, input validation, sampling and torch.compile."""
import copy
import dataclasses

import pytest
import torch

from orl.engine import BlockEvent, DecodeConfig, DoneEvent, Engine, StepEvent
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model, reference_generate

TOK = CharTokenizer()
V = TOK.vocab_size
IDS = dict(mask_id=TOK.mask_id, eos_id=TOK.eos_id, pad_id=TOK.pad_id)

RULES = {  # settings that give multi-step blocks on the random models below
    "threshold": dict(threshold=0.5),
    "topk": dict(steps_per_block=3),
    "factor": dict(factor=1.5),
    "entropy": dict(entropy_bound=1.0),
}
RESIDUALS = ("off", "rcd", "adapter")
# (block_len, prompt, max_new_tokens): prompts shorter than a block and over two blocks; max_new_tokens
# a multiple of block_len and not
CASES = [(4, "hi", 13), (8, "hello world", 30), (16, "abc", 21), (8, "a prompt longer than two blocks", 16)]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return random_model(vocab_size=V)


@pytest.fixture(scope="module")
def engine(model):
    return Engine(model, TOK)


@pytest.fixture(scope="module")
def eos_engine():
    """Same weights plus an EOS bias: EOS shows up in the middle of some answers, not in others."""
    return Engine(random_model(vocab_size=V, eos_bias=5.0), TOK)


@pytest.fixture(scope="module")
def no_eos_engine():
    return Engine(random_model(vocab_size=V, eos_bias=-1e4), TOK)


def cfg_of(rule="threshold", residual="off", block_len=8, max_new_tokens=16, **kw) -> DecodeConfig:
    return DecodeConfig(block_len=block_len, max_new_tokens=max_new_tokens, rule=rule, residual=residual,
                        **{**RULES[rule], **kw})


def assert_same_as_reference(engine, prompt: str, cfg: DecodeConfig, seed: int | None = None):
    """Engine (no trace) == reference (tokens, EOS, per-block steps, forward counts); engine with trace ==
    reference step by step (inputs, proposals, commits, the residual z / a consumed)."""
    g = engine.generate(prompt, cfg, seeds=None if seed is None else [seed])[0]
    r = reference_generate(engine.model, TOK.encode(prompt), cfg, seed=seed, **IDS)
    where = f"{prompt!r} {cfg}"
    assert g.token_ids == r.token_ids, where
    assert (g.finished, g.block_steps, g.step_forwards, g.commit_forwards) == \
           (r.finished, r.block_steps, r.step_forwards, r.commit_forwards), where
    t = engine.generate(prompt, cfg, trace=True, seeds=None if seed is None else [seed])[0]
    assert t.token_ids == g.token_ids
    assert len(t.trace) == len(r.steps), where
    for k, (s, rs) in enumerate(zip(t.trace, r.steps)):
        n = len(rs.canvas)
        assert (s.block, s.step) == (rs.block, rs.step), (where, k)
        assert s.canvas[:n].tolist() == rs.canvas, (where, k)
        assert s.unresolved[:n].tolist() == rs.unresolved, (where, k)
        assert s.tokens[:n].tolist() == rs.tokens, (where, k)
        assert s.committed[:n].tolist() == rs.committed, (where, k)
        assert not s.unresolved[n:].any() and not s.committed[n:].any()  # beyond max_new_tokens
        if cfg.residual != "off":
            torch.testing.assert_close(s.z[:n], rs.z, atol=1e-3, rtol=1e-3)
            torch.testing.assert_close(s.a[:n], rs.a, atol=1e-4, rtol=1e-4)
    return g


# ---------------------------------------------------------------- engine == reference

@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("rule", list(RULES))
def test_engine_matches_reference(engine, rule, residual):
    multi = 0
    for L, prompt, n in CASES:
        g = assert_same_as_reference(engine, prompt, cfg_of(rule, residual, L, n))
        multi += sum(s > 1 for s in g.block_steps)
        assert g.n_tokens == n or g.finished
    assert multi >= 3, "the settings must give multi-step blocks, or the test says little about the rules"


def test_topk_one_token_per_step_matches_reference(engine):
    for residual in RESIDUALS:
        g = assert_same_as_reference(engine, "hi", cfg_of("topk", residual, 8, 11, steps_per_block=0))
        assert g.block_steps == [8, 3]


# ---------------------------------------------------------------- fused commit forward

@pytest.mark.parametrize("rule", list(RULES))
def test_unfused_commit_matches_reference(engine, rule):
    """The separate commit forward (fused_commit=False) is the same decoder: a forward more per block."""
    for L, prompt, n in CASES[:2]:
        g = assert_same_as_reference(engine, prompt, cfg_of(rule, "rcd", L, n, fused_commit=False))
        assert g.commit_forwards == len(g.block_steps) - 1


@pytest.mark.parametrize("which", ["plain", "shifted", "eos"])
def test_fused_commit_equals_unfused(engine, shifted_engine, eos_engine, which):
    """Same tokens and steps; the fused forward is each block's first step, so a block costs one
    forward less (TPF ceiling L instead of L / 2), counted once. Batched, every residual mode, sampled
    too, and the shifted read-out, whose block-start token is read off the fused clean half."""
    eng = {"plain": engine, "shifted": shifted_engine, "eos": eos_engine}[which]
    prompts = ["abc def", "hi", "hello world!"]
    for residual in RESIDUALS:
        for temperature in (0.0, 0.8):
            cfg = cfg_of("threshold", residual, 4, 18, temperature=temperature)
            fused = eng.generate(prompts, cfg, seeds=[1, 2, 3])
            plain = eng.generate(prompts, dataclasses.replace(cfg, fused_commit=False), seeds=[1, 2, 3])
            for f, p in zip(fused, plain):
                assert (f.token_ids, f.finished, f.block_steps) == (p.token_ids, p.finished, p.block_steps)
                assert f.commit_forwards == 0 and p.commit_forwards == len(p.block_steps) - 1
                assert f.forwards == p.forwards - p.commit_forwards


def test_fused_commit_reaches_tpf_block_len():
    """A model certain of every position decodes a block in one step: TPF L fused, L / 2 unfused."""
    eng = Engine(random_model(vocab_size=V, eos_bias=-1e4, head_std=50.0), TOK)
    cfg = DecodeConfig(block_len=4, max_new_tokens=16, rule="threshold", threshold=1e-6)
    fused, plain = eng.generate("hi", cfg)[0], eng.generate("hi", dataclasses.replace(cfg, fused_commit=False))[0]
    assert fused.block_steps == plain.block_steps == [1, 1, 1, 1] and fused.token_ids == plain.token_ids
    assert fused.tpf == 4.0 and plain.tpf == 16 / 7


@pytest.mark.parametrize("name", ["orl-tiny-base", "orl-tiny-orl"])
def test_fused_commit_is_token_identical_on_the_shipped_checkpoints(name):
    """The shipped trained models (shifted read-out; the ORL one with its residual adapter), on
    held-out prompts of every family and on three-block `long` answers, batched."""
    from pathlib import Path

    from orl.eval.tasks import make_samples

    eng = Engine.from_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / name)
    prompts = [s.prompt for s in make_samples("all", "heldout", 10) + make_samples("long", "heldout", 4)]
    cfg = DecodeConfig.from_manifest(eng.manifest, max_new_tokens=64)
    fused = eng.generate(prompts, cfg)
    plain = eng.generate(prompts, dataclasses.replace(cfg, fused_commit=False))
    assert [g.token_ids for g in fused] == [g.token_ids for g in plain]
    assert [g.block_steps for g in fused] == [g.block_steps for g in plain]
    assert sum(g.forwards for g in plain) - sum(g.forwards for g in fused) == sum(g.commit_forwards for g in plain) > 4


@pytest.fixture(scope="module")
def shifted_engine():
    """A Dream-style shifted read-out: token i is read off position i - 1, so the first token of each
    block comes from the carried state of the last committed position (the prompt's last token)."""
    return Engine(random_model(vocab_size=V, shift_logits=True, eos_bias=5.0), TOK)


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("rule", ["threshold", "topk"])
def test_shifted_readout_matches_reference(shifted_engine, rule, residual):
    for L, prompt, n in CASES:
        assert_same_as_reference(shifted_engine, prompt, cfg_of(rule, residual, L, n))


def test_shifted_readout_batches_chunks_and_differs_from_unshifted(shifted_engine):
    prompts = ["abc def", "hi", "hello world!"]  # left padding: the carry is each row's own last token
    cfg = cfg_of("threshold", "adapter", 4, 18)
    batch = shifted_engine.generate(prompts, cfg)
    for p, b in zip(prompts, batch):
        assert fields(b) == fields(shifted_engine.generate(p, cfg)[0])
        assert fields(b) == fields(shifted_engine.generate(p, dataclasses.replace(cfg, chunk_steps=3))[0])
    assert len({len(b.block_steps) for b in batch}) > 1  # rows finish in different blocks
    # the same weights without the shift decode differently: the flag is not ignored
    plain = copy.deepcopy(shifted_engine.model)
    plain.args = dataclasses.replace(plain.args, shift_logits=False)
    assert [g.token_ids for g in Engine(plain, TOK).generate(prompts, cfg)] != [g.token_ids for g in batch]


@pytest.mark.parametrize("eos_fill", [True, False])
@pytest.mark.parametrize("rule", list(RULES))
def test_engine_matches_reference_with_eos(eos_engine, rule, eos_fill):
    finished = []
    for prompt, residual in [("hi", "off"), ("abc def", "rcd"), ("xyz", "adapter"), ("hello world!", "off")]:
        g = assert_same_as_reference(eos_engine, prompt, cfg_of(rule, residual, 4, 18, eos_fill=eos_fill))
        finished.append(g.finished)
    assert any(finished), "some answers must stop at EOS"


@pytest.mark.parametrize("rule,residual", [("threshold", "rcd"), ("entropy", "off"), ("factor", "adapter")])
def test_sampling_matches_reference(engine, rule, residual):
    for seed in (0, 7):
        assert_same_as_reference(engine, "hello", cfg_of(rule, residual, 8, 20, temperature=0.8), seed=seed)


def test_padded_vocab_rows_are_never_generated():
    """A model vocabulary padded beyond the tokenizer's (common in HF checkpoints): the extra rows
    are banned like mask / pad, even when the model prefers them."""
    model = random_model(vocab_size=V + 6)
    with torch.no_grad():
        model.lm_head.weight[V:] *= 4.0
    engine = Engine(model, TOK)
    cfg = cfg_of("threshold", "rcd", 8, 20)
    r = reference_generate(model, TOK.encode("hello"), cfg, **IDS)
    assert any(t >= V for t in r.token_ids), "the padded rows must be attractive, or the test says nothing"
    g = engine.generate("hello", cfg)[0]
    assert max(g.token_ids) < V
    r = reference_generate(model, TOK.encode("hello"), cfg, tokenizer_vocab=V, **IDS)
    assert g.token_ids == r.token_ids and g.block_steps == r.block_steps


def test_residual_modes_change_the_tokens(engine, model):
    out = {res: engine.generate("hello world", cfg_of("threshold", res, 8, 30))[0].token_ids for res in RESIDUALS}
    assert out["rcd"] != out["off"] and out["adapter"] != out["off"] and out["rcd"] != out["adapter"]
    # an untrained adapter (zero down projection) is exactly the base model
    fresh = copy.deepcopy(model)
    torch.nn.init.zeros_(fresh.model.residual_adapter.down_proj.weight)
    assert Engine(fresh, TOK).generate("hello world", cfg_of("threshold", "adapter", 8, 30))[0].token_ids == out["off"]


def test_adapter_mode_needs_adapter_weights():
    e = Engine(random_model(vocab_size=V, adapter_dim=0), TOK)
    with pytest.raises(ValueError, match="adapter"):
        e.generate("hi", cfg_of("threshold", "adapter"))


# ---------------------------------------------------------------- batching

def fields(g):
    return g.token_ids, g.finished, g.block_steps, g.step_forwards, g.commit_forwards


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_batch_equals_each_prompt_alone(eos_engine, temperature):
    prompts = ["abc def", "hi", "hello world!"]  # different lengths: left padding; EOS in different blocks
    seeds = [11, 12, 13]
    cfg = cfg_of("threshold", "rcd", 4, 18, temperature=temperature)
    batch = eos_engine.generate(prompts, cfg, seeds=seeds)
    alone = [eos_engine.generate(p, cfg, seeds=[s])[0] for p, s in zip(prompts, seeds)]
    for b, a in zip(batch, alone):
        assert fields(b) == fields(a)
    if temperature == 0:
        assert [g.finished for g in batch] == [True, False, True]  # a row stops while the others go on
        assert len(batch[0].block_steps) < len(batch[1].block_steps)  # ... and runs no more blocks
    # same with the trace on, and a larger chunk of steps between host checks
    traced = eos_engine.generate(prompts, dataclasses.replace(cfg, chunk_steps=3), seeds=seeds, trace=True)
    for b, a in zip(traced, alone):
        assert fields(b) == fields(a)
        assert len(b.trace) == b.step_forwards


def test_batch_default_seeds_are_per_row(engine):
    cfg = cfg_of("threshold", "off", 8, 16, temperature=1.0, seed=5)
    batch = engine.generate(["hi", "hi"], cfg)
    assert batch[0].token_ids == engine.generate("hi", cfg)[0].token_ids                      # seed 5
    assert batch[1].token_ids == engine.generate("hi", dataclasses.replace(cfg, seed=6))[0].token_ids
    assert batch[0].token_ids != batch[1].token_ids


# ---------------------------------------------------------------- traces

@pytest.mark.parametrize("rule,residual", [("threshold", "rcd"), ("topk", "adapter"), ("entropy", "off")])
def test_trace_on_equals_off_and_replays(eos_engine, rule, residual):
    cfg = cfg_of(rule, residual, 8, 20)
    L, D = cfg.block_len, eos_engine.model.args.dim
    for prompt in ("hi", "abc def", "xyz"):
        off = eos_engine.generate(prompt, cfg)[0]
        on = eos_engine.generate(prompt, cfg, trace=True)[0]
        assert off.trace is None
        assert fields(on) == fields(off)
        tr = on.trace
        assert len(tr) == on.step_forwards
        blocks = sorted({s.block for s in tr})
        assert blocks == list(range(len(on.block_steps)))
        canvas_end = []
        for j in blocks:
            steps = [s for s in tr if s.block == j]
            assert [s.step for s in steps] == list(range(on.block_steps[j]))
            for s in steps:
                for f in ("canvas", "unresolved", "tokens", "confidence", "entropy", "committed"):
                    assert getattr(s, f).shape == (L,), f
                assert s.unresolved.dtype == torch.bool and s.committed.dtype == torch.bool
                if residual == "off":
                    assert s.z is None and s.a is None
                else:
                    assert s.z.shape == (L, D) and s.a.shape == (L,)
                assert ((s.confidence > 0) & (s.confidence <= 1)).all() and (s.entropy >= 0).all()
                # the step computes entropy only for the entropy rule or a trace: the trace holds the real
                # one (greedy: conf = p_max, and Shannon entropy >= min-entropy -log p_max > 0 if p_max < 1)
                assert (s.entropy >= -s.confidence.log() - 1e-4).all()
                assert s.committed.any() and not (s.committed & ~s.unresolved).any()  # >= 1, only unresolved
                assert (s.canvas[s.unresolved] == TOK.mask_id).all()
            first = steps[0]
            assert first.unresolved.sum() == min(L, cfg.max_new_tokens - j * L)
            if residual != "off":  # cold start at every block
                assert not first.z.any() and not first.a.any()
            for s, nxt in zip(steps, steps[1:]):
                # committed positions become resolved with the proposed token; nothing else changes
                # except EOS fill (unresolved positions after a resolved EOS turn into EOS)
                left = s.unresolved & ~s.committed
                assert not (nxt.unresolved & ~left).any()
                filled = left & ~nxt.unresolved
                assert (nxt.canvas[filled] == TOK.eos_id).all()
                assert torch.equal(nxt.canvas[s.committed], s.tokens[s.committed])
                keep = ~s.unresolved
                assert torch.equal(nxt.canvas[keep], s.canvas[keep])
                if residual != "off":
                    assert nxt.z.abs().sum() > 0
            last = steps[-1]
            final = torch.where(last.committed, last.tokens, last.canvas)
            left = last.unresolved & ~last.committed
            if left.any():  # the last step resolved the rest by EOS fill
                assert cfg.eos_fill and (final[~left] == TOK.eos_id).any()
                final = torch.where(left, TOK.eos_id, final)
            canvas_end += final[: min(L, cfg.max_new_tokens - j * L)].tolist()
        expected = canvas_end[: canvas_end.index(TOK.eos_id) + 1] if TOK.eos_id in canvas_end else canvas_end
        assert on.token_ids == expected  # the replayed canvas is the output


def test_trace_to_dict_and_stream_events(engine):
    cfg = cfg_of("threshold", "rcd", 8, 12)
    events = list(engine.stream("hi", cfg, steps=True))
    assert isinstance(events[-1], DoneEvent) and sum(isinstance(e, DoneEvent) for e in events) == 1
    gen = events[-1].generations[0]
    steps = [e for e in events if isinstance(e, StepEvent)]
    blocks = [e for e in events if isinstance(e, BlockEvent)]
    assert len(steps) == gen.step_forwards and len(blocks) == len(gen.block_steps) == 2
    assert blocks[-1].token_ids[0] == gen.token_ids and blocks[-1].text[0] == gen.text
    # n_valid: the block's positions within max_new_tokens (12 = 8 + 4)
    assert [e.n_valid for e in blocks] == [8, 4] and {(e.block, e.n_valid) for e in steps} == {(0, 8), (1, 4)}
    # resolved: the block's valid positions fixed once the step has committed; all of them at its last step
    for j, n in ((0, 8), (1, 4)):
        block = [e for e in steps if e.block == j]
        assert [e.resolved for e in block] == sorted(e.resolved for e in block) and block[-1].resolved == n
        assert block[0].resolved == int(block[0].record.committed.sum())
    assert all(a.at <= b.at for a, b in zip(events, events[1:]))
    # the engine counts forwards for the streams: steps, plus a commit forward per block when unfused
    assert [e.forwards for e in steps] == list(range(1, gen.forwards + 1))
    assert blocks[-1].forwards == gen.forwards == gen.step_forwards
    plain = list(engine.stream("hi", dataclasses.replace(cfg, fused_commit=False), steps=True))
    b0 = [e for e in plain if isinstance(e, BlockEvent)]
    assert [e.forwards for e in b0] == [gen.block_steps[0], gen.step_forwards + 1]
    assert [e.forwards for e in plain if isinstance(e, StepEvent)][gen.block_steps[0]] == gen.block_steps[0] + 2
    d = steps[0].record.to_dict(TOK)
    assert set(d) >= {"block", "step", "canvas", "unresolved", "tokens", "confidence", "entropy", "committed",
                      "canvas_text", "tokens_text"}
    assert d["canvas_text"] == ["<mask>"] * 8
    with pytest.raises(ValueError, match="empty"):
        list(engine.stream("", cfg))


# ---------------------------------------------------------------- EOS, max_new_tokens, forwards, TPF

class ForwardCounter:
    def __init__(self, model):
        self.n = 0
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.n += 1

    def close(self):
        self.handle.remove()


@pytest.mark.parametrize("eos_fill,fused", [(True, True), (False, True), (True, False)])
def test_eos_stops_the_answer_and_the_blocks(eos_engine, eos_fill, fused):
    cfg = cfg_of("threshold", "rcd", 4, 18, eos_fill=eos_fill, fused_commit=fused)
    counter = ForwardCounter(eos_engine.model)
    try:
        g = eos_engine.generate("abc def", cfg)[0]
    finally:
        counter.close()
    eos = TOK.eos_id
    assert g.finished and g.token_ids[-1] == eos and g.token_ids.count(eos) == 1
    n_blocks = -(-g.n_tokens // 4)
    assert 1 < n_blocks < 5, "EOS must fall in a middle block for this test"
    assert len(g.block_steps) == n_blocks                      # no block after the EOS block runs
    # no commit forward for the EOS block; fused, the others ride on the next block's first step
    assert g.commit_forwards == (0 if fused else n_blocks - 1)
    assert counter.n == 1 + g.step_forwards + g.commit_forwards
    assert g.text == TOK.decode(g.token_ids[:-1])


def test_forced_eos_first_token():
    e = Engine(random_model(vocab_size=V, eos_bias=1e3), TOK)
    for rule in RULES:
        g = e.generate("hi", cfg_of(rule, "rcd", 8, 40))[0]
        assert g.token_ids == [TOK.eos_id] and g.finished and g.text == ""
        assert len(g.block_steps) == 1 and g.commit_forwards == 0
        if rule != "topk":  # every position is a confident EOS: one step (with or without EOS fill)
            assert g.block_steps == [1]
        assert g.tpf == 1 / g.step_forwards


@pytest.mark.parametrize("max_new,block_len,fused", [(1, 8, True), (5, 8, True), (8, 8, True), (17, 8, True),
                                                     (13, 4, True), (17, 8, False), (13, 4, False)])
def test_max_new_tokens_respected(no_eos_engine, max_new, block_len, fused):
    cfg = cfg_of("threshold", "rcd", block_len, max_new, fused_commit=fused)
    counter = ForwardCounter(no_eos_engine.model)
    try:
        g = no_eos_engine.generate("hello", cfg)[0]
    finally:
        counter.close()
    n_blocks = -(-max_new // block_len)
    assert g.n_tokens == max_new and not g.finished and TOK.eos_id not in g.token_ids
    assert len(g.block_steps) == n_blocks
    assert g.step_forwards == sum(g.block_steps)
    assert g.commit_forwards == (0 if fused else n_blocks - 1)  # the final block is not committed
    assert counter.n == 1 + g.step_forwards + g.commit_forwards
    assert g.forwards == g.step_forwards + g.commit_forwards
    assert g.tpf == pytest.approx(max_new / (g.step_forwards + g.commit_forwards))
    assert g.tokens_per_s > 0 and g.total_s >= g.prefill_s > 0


@pytest.mark.parametrize("fused", [False, True])
def test_commit_forward_is_a_one_step_chunk_of_the_runner(engine, monkeypatch, fused):
    """Without a trace every forward after the prefill goes through the ChunkRunner (compiled / captured
    in those modes): the steps as chunks of chunk_steps, each commit forward as a chunk of one step
    (one forward, not chunk_steps of them), or, fused, inside the first chunk of the next block. The
    engine itself never runs an eager step."""
    import orl.engine.engine as engine_module

    chunks = []
    call = type(engine.runner).__call__
    monkeypatch.setattr(type(engine.runner), "__call__",
                        lambda self, st, cfg, fused=False: (chunks.append((cfg.chunk_steps, fused)),
                                                            call(self, st, cfg, fused))[1])
    monkeypatch.setattr(engine_module, "denoise_step", None)  # calling it would raise
    g = engine.generate("hello", cfg_of("threshold", "rcd", 8, 30, chunk_steps=3, fused_commit=fused))[0]
    n = len(g.block_steps)
    assert n == 4
    if fused:  # the first chunk of every block after the first
        assert g.commit_forwards == 0 and chunks.count((3, True)) == n - 1
        assert [c for c in chunks if c[0] == 1] == []
    else:
        assert chunks.count((1, False)) == g.commit_forwards == n - 1 and not any(f for _, f in chunks)
    assert {c for c, _ in chunks} == {3} | ({1} if not fused else set())


def test_block_buffers_follow_the_slot_layout(engine):
    """prepare_block (run by begin_block) writes the block's mask, positions and slots once per block:
    the block's queries see every valid key up to the end of their own block, whatever the block."""
    cfg = cfg_of("threshold", "off", 8, 21)
    prompts = [TOK.encode(p) for p in ("hello world", "hi")]
    st, P = engine.setup(prompts, cfg)
    L, S = cfg.block_len, st.cache.max_len  # the request's cache bucket, not engine.max_len
    for j in range(3):
        n = engine.begin_block(st, cfg, P, j, [True, True])
        start = P + j * L
        slot = torch.arange(S)
        for b, p in enumerate(prompts):
            seen = (slot >= P - len(p)) & (slot < min(start + L, P + cfg.max_new_tokens))
            assert torch.equal(st.mask[b], seen.expand(L, S)), (j, b)
            assert st.pos[b].tolist() == [start + i - (P - len(p)) for i in range(L)]
        assert st.slots.tolist() == list(range(start, start + L))
        assert st.n_valid.tolist() == [n, n]


def test_chunk_steps_do_not_change_tokens_or_counts(engine):
    for rule in RULES:
        base = engine.generate("hello", cfg_of(rule, "rcd", 8, 20))[0]
        for k in (2, 5):
            g = engine.generate("hello", cfg_of(rule, "rcd", 8, 20, chunk_steps=k))[0]
            assert fields(g) == fields(base), (rule, k)


# ---------------------------------------------------------------- input validation

@pytest.mark.parametrize("kw,words", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=-3), "max_new_tokens"),
    (dict(threshold=0.0), "threshold"),
    (dict(threshold=1.5), "threshold"),
    (dict(threshold=-0.1), "threshold"),
    (dict(block_len=0), "block_len"),
    (dict(block_len=-4), "block_len"),
    (dict(rule="greedy"), "rule"),
    (dict(residual="soft"), "residual"),
    (dict(temperature=-1.0), "temperature"),
    (dict(chunk_steps=0), "chunk_steps"),
])
def test_bad_config_raises_naming_the_problem(engine, kw, words):
    cfg = DecodeConfig(block_len=8, max_new_tokens=8)
    cfg = dataclasses.replace(cfg, **kw)
    with pytest.raises(ValueError, match=words):
        engine.generate("hi", cfg)
    with pytest.raises(ValueError, match=words):
        cfg.validate()


def test_bad_prompts_raise_naming_the_problem(engine):
    cfg = DecodeConfig(block_len=8, max_new_tokens=8)
    with pytest.raises(ValueError, match="empty"):
        engine.generate("", cfg)
    with pytest.raises(ValueError, match="empty"):
        engine.generate(["hi", ""], cfg)
    with pytest.raises(ValueError, match="empty"):
        engine.generate_ids([[5, 6], []], cfg)
    with pytest.raises(ValueError, match="no prompts"):
        engine.generate_ids([], cfg)
    max_len = engine.max_len
    with pytest.raises(ValueError, match="context"):
        engine.generate("x" * (max_len + 1), cfg)           # longer than the context by itself
    with pytest.raises(ValueError, match="context"):
        engine.generate("x" * (max_len - 4), cfg)           # prompt + one block does not fit
    with pytest.raises(ValueError, match="seeds"):
        engine.generate(["a", "b"], cfg, seeds=[1])
    # the engine is still usable after rejected requests
    assert engine.generate("hi", cfg)[0].n_tokens > 0


# ---------------------------------------------------------------- sampling

def test_sampling_reproducible_per_seed_and_differs_across_seeds(engine):
    cfg = cfg_of("threshold", "rcd", 8, 24, temperature=1.0)
    runs = {s: engine.generate("hello", dataclasses.replace(cfg, seed=s))[0].token_ids for s in (0, 1, 2)}
    assert engine.generate("hello", dataclasses.replace(cfg, seed=1))[0].token_ids == runs[1]
    assert len({tuple(v) for v in runs.values()}) == 3
    greedy = engine.generate("hello", cfg_of("threshold", "rcd", 8, 24))[0].token_ids
    assert greedy not in runs.values()
    banned = {TOK.mask_id, TOK.pad_id}
    assert not banned & {t for v in runs.values() for t in v}


# ---------------------------------------------------------------- torch.compile

def test_compile_matches_eager():
    # one layer and one step per chunk keep inductor's cold compile to ~10-20 s on 2 cores; the shifted
    # read-out is the path with more in it (the carried state, updated under a predicate)
    model = random_model(vocab_size=V, n_layers=1, shift_logits=True)
    cfg = cfg_of("threshold", "rcd", 8, 12)
    eager = Engine(model, TOK).generate("hello", cfg)[0]
    compiled = Engine(model, TOK).generate("hello", dataclasses.replace(cfg, compile=True))[0]
    assert fields(compiled) == fields(eager)
    assert eager.step_forwards > len(eager.block_steps)  # multi-step blocks ran through the compiled step


def test_state_buffers_are_bounded():
    from orl.engine.engine import MAX_STATES

    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=CharTokenizer().vocab_size, dim=32, n_layers=1, n_heads=2,
                                  n_kv_heads=1, head_dim=16, ffn_dim=64, max_seq_len=128))
    engine = Engine(model, CharTokenizer())
    for block_len in range(1, MAX_STATES + 3):
        engine.generate("ab", DecodeConfig(block_len=block_len, max_new_tokens=4))
    assert len(engine._states) == MAX_STATES
    assert (1, MAX_STATES + 2, 64) in engine._states and (1, 1, 64) not in engine._states  # (batch, block, slots)
