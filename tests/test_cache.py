"""KV-cache equivalence: decoding a block through the static cache must give the logits of one
full forward over [prompt, committed blocks, current block] under the inference mask, and the
noisy rows of a staircase training row (DESIGN section 2)."""
import pytest
import torch

from orl.model import ModelArgs, Transformer, masks

V = 48
MASK = V - 1  # the mask id comes from config in real use; any id works for a random model
L = 4  # block length

VARIANTS = {
    "mha": dict(n_kv_heads=4, qk_norm=False),
    "gqa_qknorm": dict(n_kv_heads=2, qk_norm=True),
    "learned_pos_partial_rope": dict(n_kv_heads=2, learned_pos=True, rotary_fraction=0.5),
    "logn": dict(n_kv_heads=2, attn_logn=True),  # n, the keys a query sees, must not count stale or padded slots
    "moe": dict(n_kv_heads=1, n_experts=4, n_experts_per_tok=2, moe_ffn_dim=24,
                shared_expert_ffn_dim=16, moe_every=2),
}


def tiny_model(**kw) -> Transformer:
    torch.manual_seed(0)
    args = ModelArgs(vocab_size=V, dim=32, n_layers=3, n_heads=4, head_dim=8, ffn_dim=48,
                     max_seq_len=64, **kw)
    model = Transformer(args).eval()
    # unit norm weights would hide a norm applied to the wrong axis; perturb them
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("logn_scale"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def tokens(n: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V - 1, (batch, n), generator=g)


def noisy(block: torch.Tensor, masked: list[int]) -> torch.Tensor:
    """The current block's state: real tokens with some positions set to the mask token."""
    out = block.clone()
    out[..., masked] = MASK
    return out


def run_cached(model, prompt, valid, committed, current, cache_extra=3):
    """prompt [B, P] (left padded where valid is False), committed: list of clean [B, L] blocks,
    current [B, L] noisy block. Returns (logits of the current block [B, L, V], cache)."""
    B, P = prompt.shape
    n = len(committed)
    S = P + (n + 1) * L + cache_extra  # spare slots hold garbage the mask must hide
    cache = model.new_cache(B, S)
    cache.k.normal_()  # stale data from "a previous request"
    cache.v.normal_()
    slot_block = masks.block_ids(P, S - P, L)  # prompt block 0, answer block j -> j + 1
    clean = torch.zeros(S, dtype=torch.long)
    slot_valid = torch.cat([valid, torch.ones(B, S - P, dtype=torch.bool)], dim=1)
    pad = (~valid).sum(1)
    pos = torch.arange(S)[None] - pad[:, None]  # every row's RoPE positions start at 0 on its first real token

    def step(tok, slots, q_state, k_state):
        mask = masks.visibility(slot_block[slots], q_state, slot_block, k_state, k_valid=slot_valid)
        return model(tok, pos[:, slots], mask, cache=cache, slots=slots)

    with torch.no_grad():
        step(prompt, torch.arange(P), clean[:P], clean)  # prefill
        for j, blk in enumerate(committed):  # commit forward: clean K/V of a finished block
            slots = P + j * L + torch.arange(L)
            step(blk, slots, clean[:L], clean)
        slots = P + n * L + torch.arange(L)
        k_state = clean.clone()
        k_state[slots] = 1  # the current block is a noisy state that sees itself
        logits = step(current, slots, torch.ones(L, dtype=torch.long), k_state)
    return logits, cache


def run_full(model, prompt, committed, current):
    """One forward without cache over [prompt, committed, current] (one row, no padding)."""
    P = prompt.shape[1]
    seq = torch.cat([prompt, *committed, current], dim=1)
    T = seq.shape[1]
    block = masks.block_ids(P, T - P, L)
    state = torch.zeros(T, dtype=torch.long)
    state[-L:] = 1
    mask = masks.visibility(block, state, block, state)[None]
    with torch.no_grad():
        return model(seq, torch.arange(T)[None], mask)[:, -L:]


def run_staircase(model, prompt, committed, current, current_clean):
    """The training row: the clean sequence including the current block's clean answer, then the
    noisy copy of the current block. Its noisy rows must not be able to read the clean answer."""
    P = prompt.shape[1]
    n = len(committed)
    meta, mask = masks.staircase(P, (n + 1) * L, L, noisy_blocks=[n])
    seq = torch.cat([prompt, *committed, current_clean, current], dim=1)
    with torch.no_grad():
        return model(seq, meta["pos"][None], mask[None])[:, -L:]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n_committed", [0, 2])
def test_block_decode_matches_full_forward_and_staircase(variant, n_committed):
    model = tiny_model(**VARIANTS[variant])
    P = 5
    prompt = tokens(P, seed=1)
    committed = [tokens(L, seed=10 + j) for j in range(n_committed)]
    clean_answer = tokens(L, seed=99)
    current = noisy(clean_answer, [0, 2])
    cached, _ = run_cached(model, prompt, torch.ones(1, P, dtype=torch.bool), committed, current)
    full = run_full(model, prompt, committed, current)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    stair = run_staircase(model, prompt, committed, current, clean_answer)
    torch.testing.assert_close(cached, stair, atol=1e-5, rtol=1e-5)
    # the comparison is not vacuous: a different block state changes the logits
    other = run_full(model, prompt, committed, noisy(clean_answer, [1, 3]))
    assert not torch.allclose(other, full, atol=1e-3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_left_padded_batch_equals_rows_alone(variant):
    model = tiny_model(**VARIANTS[variant])
    lens = [3, 6]
    P = max(lens)
    prompts = [tokens(n, seed=20 + i) for i, n in enumerate(lens)]
    committed = [tokens(L, batch=2, seed=30)]
    current = noisy(tokens(L, batch=2, seed=31), [1, 3])
    padded = torch.full((2, P), MASK)
    valid = torch.zeros(2, P, dtype=torch.bool)
    for i, p in enumerate(prompts):
        padded[i, P - lens[i]:] = p[0]
        valid[i, P - lens[i]:] = True
    batched, _ = run_cached(model, padded, valid, committed, current)
    assert torch.isfinite(batched).all()
    for i, p in enumerate(prompts):
        row_committed = [c[i:i + 1] for c in committed]
        alone, _ = run_cached(model, p, torch.ones(1, lens[i], dtype=torch.bool), row_committed, current[i:i + 1])
        torch.testing.assert_close(batched[i:i + 1], alone, atol=1e-5, rtol=1e-5)
        full = run_full(model, p, row_committed, current[i:i + 1])
        torch.testing.assert_close(batched[i:i + 1], full, atol=1e-5, rtol=1e-5)


def test_rerunning_a_block_step_overwrites_its_slots():
    model = tiny_model(**VARIANTS["gqa_qknorm"])
    P = 4
    prompt = tokens(P, seed=2)
    committed = [tokens(L, seed=3)]
    first = noisy(tokens(L, seed=4), [0, 1, 2, 3])
    second = noisy(tokens(L, seed=4), [1])
    logits1, cache = run_cached(model, prompt, torch.ones(1, P, dtype=torch.bool), committed, first)

    slots = P + L + torch.arange(L)
    slot_block = masks.block_ids(P, cache.max_len - P, L)
    k_state = torch.zeros(cache.max_len, dtype=torch.long)
    k_state[slots] = 1
    mask = masks.visibility(slot_block[slots], torch.ones(L, dtype=torch.long), slot_block, k_state)[None]
    pos = slots[None]
    outside = torch.ones(cache.max_len, dtype=torch.bool)
    outside[slots] = False
    k_before, v_before = cache.k[:, :, :, outside].clone(), cache.v[:, :, :, outside].clone()
    with torch.no_grad():
        again = model(first, pos, mask, cache=cache, slots=slots)
        after_second = model(second, pos, mask, cache=cache, slots=slots)
        third = model(first, pos, mask, cache=cache, slots=slots)
    assert torch.equal(again, logits1)
    assert torch.equal(third, logits1)
    # the second state's step sees its own fresh K/V, not the first state's
    fresh, _ = run_cached(model, prompt, torch.ones(1, P, dtype=torch.bool), committed, second)
    torch.testing.assert_close(after_second, fresh, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after_second, logits1, atol=1e-3)
    # a block step writes only its own slots: committed context is untouched
    assert torch.equal(cache.k[:, :, :, outside], k_before)
    assert torch.equal(cache.v[:, :, :, outside], v_before)


def test_cache_buffers_shape_and_length_is_device_tensor():
    model = tiny_model(**VARIANTS["gqa_qknorm"])
    cache = model.new_cache(3, 20)
    a = model.args
    assert cache.k.shape == cache.v.shape == (a.n_layers, 3, a.n_kv_heads, 20, a.head_dim)
    assert cache.max_len == 20
    assert cache.k.dtype == model.lm_head.weight.dtype
    # the committed length lives on the device so a captured decode graph never reads a host int
    assert isinstance(cache.length, torch.Tensor)
    assert cache.length.dtype == torch.long and cache.length.ndim == 0
    assert cache.length.device == model.lm_head.weight.device
    assert any(b is cache.length for b in cache.buffers())  # registered, so .to(device) moves it
    cache.k.fill_(1.0)
    cache.length.fill_(7)
    cache.reset()
    assert cache.length.item() == 0 and not cache.k.any() and not cache.v.any()


@pytest.mark.parametrize("variant", ["gqa_qknorm", "moe", "logn"])
def test_fused_commit_forward_equals_commit_then_step(variant):
    """The fused forward over [clean block k | masked block k + 1] (staircase mask) writes the same
    K/V as the commit forward of block k followed by the first step of block k + 1, and gives the
    same logits and carried state (shifted read-out, adapter residual, a left-padded batch)."""
    import copy

    from orl.engine import DecodeConfig, Engine
    from orl.engine.decode import block_forward, fused_forward
    from orl.tokenizer import CharTokenizer

    tok = CharTokenizer()
    kw = {**VARIANTS[variant], "vocab_size": tok.vocab_size, "shift_logits": True, "adapter_dim": 16}
    torch.manual_seed(0)
    args = ModelArgs(dim=32, n_layers=3, n_heads=4, head_dim=8, ffn_dim=48, max_seq_len=64, **kw)
    eng = Engine(Transformer(args).eval(), tok)
    cfg = DecodeConfig(block_len=L, max_new_tokens=3 * L, residual="adapter")
    prompts = [tok.encode("hello"), tok.encode("a")]
    st, P = eng.setup(prompts, cfg)
    eng.begin_block(st, cfg, P, 0, [True, True])
    st.canvas.copy_(tokens(L, 2, seed=3) % 60 + 4)  # block 0, resolved
    st.unresolved.zero_()
    fused_st = copy.deepcopy(st)
    with torch.no_grad():
        eng.runner.commit(st, cfg)                               # unfused: the commit forward, ...
        eng.begin_block(st, cfg, P, 1, [True, True])
        want = block_forward(eng.model, st, cfg, eng.ids)        # ... then block 1's first step
        eng.begin_block(fused_st, cfg, P, 1, [True, True], fused=True)
        got = fused_forward(eng.model, fused_st, cfg, eng.ids)
    keep = ~st.banned
    torch.testing.assert_close(got[..., keep], want[..., keep], atol=1e-5, rtol=1e-5)
    end = P + 2 * L
    torch.testing.assert_close(fused_st.cache.k[..., :end, :], st.cache.k[..., :end, :], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_st.cache.v[..., :end, :], st.cache.v[..., :end, :], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_st.carry, st.carry, atol=1e-5, rtol=1e-5)
