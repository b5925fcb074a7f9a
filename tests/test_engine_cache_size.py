"""The engine sizes its decode state to the request, not to the model's context: a 32k-context model
decoding a short prompt holds a cache of the request's bucket (prompt + answer blocks, next power of
two, at least 64), one state per (batch, block length, bucket), reused; a state over ORL_KV_CACHE_GIB
is refused by name before anything is allocated. Tokens equal a cache of the whole context."""
import pytest
import torch

import orl.engine.engine as engine_module
from orl.engine import DecodeConfig, Engine
from orl.engine.decode import DecodeState
from orl.model.kv_cache import CacheBudgetError
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
CONTEXT = 32768  # Gemma 3's max_seq_len
pytestmark = pytest.mark.usefixtures("one_thread")

# per cache slot at batch 1, block 8 of the tiny model (2 layers, 2 KV heads x 8 dims, fp32): K and V
# 2 x 2 x 2 x 8 x 4 = 256, the cache's position 8 (long), valid 1 (bool), prompt_blocks 8 (long),
# the block's mask 8 and the fused mask 16 (bool)
BYTES_PER_SLOT = 256 + 8 + 1 + 8 + 8 + 16


@pytest.fixture(scope="module")
def model():
    return random_model(vocab_size=TOK.vocab_size, max_seq_len=CONTEXT, learned_pos=False, shift_logits=True,
                        eos_bias=-2.0)


def cfg_of(**kw) -> DecodeConfig:
    return DecodeConfig(**{**dict(block_len=8, max_new_tokens=21, rule="threshold", threshold=0.5), **kw})


def allocations(monkeypatch) -> list[int]:
    """The cache lengths of the decode states allocated from now on (the meta-device sizing excluded)."""
    seen, real = [], DecodeState.allocate.__func__

    def counted(cls, model, batch, cache_len, block_len, ids, device=None):
        if str(device) != "meta":
            seen.append(cache_len)
        return real(cls, model, batch, cache_len, block_len, ids, device)
    monkeypatch.setattr(DecodeState, "allocate", classmethod(counted))
    return seen


def test_a_short_request_allocates_its_bucket_not_the_context(model):
    eng = Engine(model, TOK)
    assert eng.max_len == CONTEXT                     # the hard limit stays the model's context
    st, P = eng.setup([TOK.encode("hello")], cfg_of())
    assert P == 5                                     # 5 + 3 blocks of 8 = 29 slots -> bucket 64
    assert st.cache.k.shape == (2, 1, 2, 64, 8) and st.cache.v.shape == (2, 1, 2, 64, 8)
    assert st.cache.pos.shape == (1, 64) and st.valid.shape == (1, 64) and st.prompt_blocks.shape == (64,)
    assert st.mask.shape == (1, 8, 64) and st.fmask.shape == (1, 16, 64)
    assert sum(t.nbytes for t in st.cache.buffers_kv()) == 2 * 2 * 2 * 64 * 8 * 4  # 16 KiB
    # nothing else grows with the context: a 32768-slot state is exactly BYTES_PER_SLOT larger per slot
    full = DecodeState.allocate(model, 1, CONTEXT, 8, eng.ids, device="meta")
    assert full.nbytes - st.nbytes == (CONTEXT - 64) * BYTES_PER_SLOT
    # absolute grid: 13 tokens -> one block of 8 prefilled, 5 open the first canvas, 5 + 21 answer
    # tokens take 4 canvases: 8 + 32 = 40 slots -> 64
    st, P = eng.setup([TOK.encode("x" * 13)], cfg_of(layout="absolute_grid"))
    assert (P, st.plan.n_blocks, st.cache.max_len) == (8, 4, 64)
    st, P = eng.setup([TOK.encode("x" * 60)], cfg_of(max_new_tokens=40))  # 60 + 5 x 8 = 100 -> 128
    assert st.cache.max_len == 128 and st.mask.shape == (1, 8, 128)


def test_the_bucket_is_capped_by_max_len(model):
    eng = Engine(model, TOK, max_len=100)             # the engine's max_len: the limit, and the cap
    st, _ = eng.setup([TOK.encode("x" * 60)], cfg_of(max_new_tokens=40))
    assert st.cache.max_len == 100
    with pytest.raises(ValueError, match="exceeds the context of 100 tokens"):
        eng.setup([TOK.encode("x" * 61)], cfg_of(max_new_tokens=40))


PROMPTS = ["hello world", "hi", "a much longer prompt than the others, over 32 tokens"]


@pytest.mark.parametrize("layout", ["prompt_block", "absolute_grid"])
@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.8), dict(rule="topk", steps_per_block=3),
                                dict(residual="rcd", fused_commit=False)], ids=["greedy", "sampled", "topk", "rcd"])
def test_bucketed_tokens_equal_the_whole_context_cache(model, monkeypatch, layout, kw):
    cfg = cfg_of(layout=layout, **kw)
    seen = allocations(monkeypatch)
    with monkeypatch.context() as m:  # the old sizing: every state holds max_len slots (4096: CPU time)
        m.setattr(engine_module, "cache_length", lambda need, limit: limit)
        want = Engine(model, TOK, max_len=4096).generate(PROMPTS, cfg, seeds=[1, 2, 3])
    got = Engine(model, TOK).generate(PROMPTS, cfg, seeds=[1, 2, 3])
    assert seen == [4096, 128]                        # 52 + 3 or 4 blocks of 8 -> 128
    for g, w in zip(got, want):
        assert (g.token_ids, g.finished, g.block_steps, g.step_forwards, g.commit_forwards) == \
            (w.token_ids, w.finished, w.block_steps, w.step_forwards, w.commit_forwards)
    assert any(len(g.token_ids) > 8 for g in got)     # several blocks decoded


def test_full_sequence_allocates_no_state_and_a_request_sized_cache(model, monkeypatch):
    eng = Engine(model, TOK)
    lengths, new_cache = [], model.new_cache
    monkeypatch.setattr(model, "new_cache", lambda B, S, **kw: lengths.append(S) or new_cache(B, S, **kw))
    cfg = cfg_of(layout="full_sequence", max_new_tokens=12, block_len=4, full_sequence_cache="prefix")
    eng.generate(PROMPTS[:2], cfg)
    assert lengths == [11 + 12] and not eng._states   # prompt + answer, no DecodeState


def test_same_bucket_reuses_the_state_a_longer_request_gets_a_new_one(model, monkeypatch):
    eng = Engine(model, TOK)
    seen = allocations(monkeypatch)
    first, _ = eng.setup([TOK.encode("hello"), TOK.encode("hi")], cfg_of())          # 5 + 24 -> 64
    again, _ = eng.setup([TOK.encode("x" * 30), TOK.encode("y")], cfg_of())          # 30 + 24 = 54 -> 64
    assert again is first and seen == [64]
    longer, _ = eng.setup([TOK.encode("x" * 41), TOK.encode("y")], cfg_of())         # 41 + 24 = 65 -> 128
    assert longer is not first and seen == [64, 128]
    assert list(eng._states) == [(2, 8, 64), (2, 8, 128)]
    eng.generate(["hello", "hi"], cfg_of())                                          # back to 64: kept
    assert seen == [64, 128] and list(eng._states)[-1] == (2, 8, 64)


def test_a_state_over_the_budget_is_refused_by_name_before_allocating(model, monkeypatch):
    eng = Engine(model, TOK)
    eng.setup([TOK.encode("hi")], cfg_of(block_len=4))  # a state held before the refusal
    seen = allocations(monkeypatch)
    total = DecodeState.allocate(model, 1, 64, 8, eng.ids, device="meta").nbytes
    kv = 2 * 2 * 2 * 64 * 8 * 4                       # K and V x layers x KV heads x slots x dims x fp32
    assert kv < total < 2 * kv
    # the KV cache fits, the whole state does not
    monkeypatch.setenv("ORL_KV_CACHE_GIB", str((kv + 1) / 2**30))
    with pytest.raises(CacheBudgetError, match=rf"decode state of batch 1 x 64 cache slots x block 8 \(KV cache .*\) "
                                               rf"needs .* GiB \({total} bytes\), over the .* GiB budget "
                                               rf"\(ORL_KV_CACHE_GIB\).*raise ORL_KV_CACHE_GIB"):
        eng.generate("hello", cfg_of())
    # not even the KV cache fits
    monkeypatch.setenv("ORL_KV_CACHE_GIB", str((kv - 1) / 2**30))
    with pytest.raises(CacheBudgetError, match=rf"KV cache of 64 positions x batch 1 needs .* \({kv} bytes\)"):
        eng.generate("hello", cfg_of())
    assert seen == [] and list(eng._states) == [(1, 4, 64)]  # nothing allocated, nothing evicted
    monkeypatch.setenv("ORL_KV_CACHE_GIB", str(total / 2**30))  # exactly the state: allowed
    assert eng.generate("hello", cfg_of())[0].token_ids and seen == [64]


def test_the_default_budget_refuses_a_huge_request_not_a_huge_context(model):
    """32 GiB by default: a batch of 4096 rows at 32768 slots (256 B of K/V per slot and row: 32 GiB
    of K/V alone) is refused, the model's 32k context itself costs nothing until a request needs it."""
    eng = Engine(model, TOK)
    with pytest.raises(CacheBudgetError, match="32 GiB budget"):
        eng.state(4096, 8, CONTEXT)
    assert not eng._states
