"""Fast-dLLM v1's prefix and dual caches (DecodeConfig.full_sequence_cache, orl.engine.full_sequence):
named approximate modes of the exact full-sequence decoding of LLaDA / Dream.

- Where they must equal the exact mode they do: a cached forward right after its refresh (nothing
  committed since) gives the exact logits, for both modes, batched with left padding; windows decoded
  in one step each never read a stale cache, so the tokens are the exact mode's.
- Token-exact against an independent reference of Fast-dLLM v1's published loops
  (generate_with_prefix_cache / generate_with_dual_cache in NVlabs/Fast-dLLM llada/generate.py), written
  here with its own LLaDA forward from the published equations and a past-K/V cache as the published
  model keeps it (prefix: the K/V before the block, the rest recomputed; dual: the block's K/V replaced).
- How far they drift from exact on a tiny fixture: measured (agreement of the answer tokens), documented
  in docs/MODELS.md as approximate.
- Refused where they make no sense, by name; host-sync-free per step."""
import pytest
import torch

from family_fixtures import write_llada
from family_reference import attend, rms_norm, rotate, swiglu
from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.cli import main
from orl.engine import DecodeConfig, Engine
from orl.engine.full_sequence import cached_window_logits, window_logits
from orl.engine.request import encode_prompts
from orl.model.masks import see_self_if_blind
from orl.model.padding import left_pad
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_no_sync import NoHostSync

pytestmark = pytest.mark.usefixtures("one_thread")
MODES = ("prefix", "dual")
PROMPTS = ["hi", "hello world", "x = 1"]
GEN, BLOCK, STEPS = 12, 4, 2


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    d, (cfg, W) = write_llada(tmp_path_factory.mktemp("cache") / "llada")
    model, tok, manifest = load_checkpoint(d)
    return Engine(model, tok, manifest=manifest), cfg, W


def config(mode: str, **kw) -> DecodeConfig:
    return DecodeConfig(**{**dict(block_len=BLOCK, max_new_tokens=GEN, rule="topk", steps_per_block=STEPS,
                                  layout="full_sequence", eos_fill=False, full_sequence_cache=mode), **kw})


# ---------------------------------------------------------------- equivalence where it must hold

def row_inputs(engine, prompts, n_new):
    prompt, pad = left_pad(encode_prompts(engine.tokenizer, prompts), engine.pad_id)
    B, P = prompt.shape
    T = P + n_new
    g = torch.Generator().manual_seed(0)
    tokens = torch.cat([prompt, torch.randint(0, engine.tokenizer.vocab_size, (B, n_new), generator=g)], 1)
    tokens[:, P + 2::3] = engine.mask_id  # a canvas with some masks
    slot = torch.arange(T)
    valid = slot[None] >= pad[:, None]
    mask = see_self_if_blind(valid[:, None, :].expand(B, T, T))
    pos = (slot[None] - pad[:, None]).clamp(min=0)
    return tokens, pos, mask, P


@pytest.mark.parametrize("shift", [False, True], ids=["llada", "dream"])
@pytest.mark.parametrize("mode", MODES)
def test_cached_forward_after_its_refresh_is_exact(mode, shift):
    model = random_model(5, vocab_size=CharTokenizer().vocab_size, adapter_dim=0, learned_pos=False,
                         shift_logits=shift)
    engine = Engine(model, CharTokenizer())
    tokens, pos, mask, P = row_inputs(engine, PROMPTS, 3 * BLOCK)
    for lo in (P, P + BLOCK, P + 2 * BLOCK):
        hi = lo + BLOCK
        with torch.no_grad():
            exact, _ = window_logits(model, tokens, pos, mask, lo, hi, None, engine.mask_id, 0.0)
            cache = model.new_cache(tokens.shape[0], tokens.shape[1])
            first, before = window_logits(model, tokens, pos, mask, lo, hi, None, engine.mask_id, 0.0, cache)
            with NoHostSync():  # a cached step reads no tensor value back to the host
                cached = cached_window_logits(model, tokens, pos, mask, lo, hi, cache, before, mode)
        assert torch.equal(first, exact)
        assert (cached - exact).abs().max().item() <= 1e-5, (mode, lo)


@pytest.mark.parametrize("mode", MODES)
def test_one_step_windows_decode_as_the_exact_mode(llada, mode):
    engine = llada[0]
    one_step = dict(steps_per_block=1)  # each window resolved by its first (exact) forward
    want = [g.token_ids for g in engine.generate(PROMPTS, config("none", **one_step))]
    assert [g.token_ids for g in engine.generate(PROMPTS, config(mode, **one_step))] == want
    # and with one window a prefix cache is a dual cache (no suffix after the window)
    single = dict(block_len=GEN)
    assert [g.token_ids for g in engine.generate(PROMPTS, config("prefix", **single))] == \
        [g.token_ids for g in engine.generate(PROMPTS, config("dual", **single))]


# ---------------------------------------------------------------- the published loops

def llada_layers(cfg, W, x: list[int], lo: int, hi: int, past=None):
    """LLaDA forward from the published equations over the queries x[lo:hi] (positions lo..hi) with
    bidirectional attention. past None: the whole row (lo = 0, hi = T), returning also each layer's
    K/V [KV, T, hd]; else the keys are past[:lo] + the fresh K/V + past[hi:] (the published prefix cache:
    hi = T; dual cache: the block's K/V replaced). Returns (logits [hi - lo, V], kv)."""
    d, H, KV, eps = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["rms_norm_eps"]
    hd, Q = d // H, hi - lo
    pos = torch.arange(lo, hi)
    h_ = W["model.transformer.wte.weight"][torch.tensor(x[lo:hi])]
    kv = []
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        h = rms_norm(h_, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "q_proj.weight"].T).view(Q, H, hd).transpose(0, 1)
        k = (h @ W[p + "k_proj.weight"].T).view(Q, KV, hd).transpose(0, 1)
        v = (h @ W[p + "v_proj.weight"].T).view(Q, KV, hd).transpose(0, 1)
        q, k = rotate(q, pos, cfg["rope_theta"], hd), rotate(k, pos, cfg["rope_theta"], hd)
        if past is not None:
            pk, pv = past[i]
            k, v = torch.cat([pk[:, :lo], k, pk[:, hi:]], 1), torch.cat([pv[:, :lo], v, pv[:, hi:]], 1)
        kv.append((k, v))
        everything = torch.ones(Q, k.shape[1], dtype=torch.bool)
        h_ = h_ + attend(q, k, v, everything).transpose(0, 1).reshape(Q, d) @ W[p + "attn_out.weight"].T
        h = rms_norm(h_, W[p + "ff_norm.weight"], eps)
        h_ = h_ + swiglu(h, W[p + "ff_proj.weight"], W[p + "up_proj.weight"], W[p + "ff_out.weight"])
    h_ = rms_norm(h_, W["model.transformer.ln_f.weight"], eps)
    return h_ @ W["model.transformer.ff_out.weight"].T, kv


def fast_dllm_generate(cfg, W, prompt: list[int], mode: str, mask_id: int, banned: list[int]) -> list[int]:
    """generate_with_prefix_cache / generate_with_dual_cache, greedy, low_confidence remasking, the
    per-block schedule get_num_transfer_tokens(block masks, steps): per block one full forward (its
    logits make step 0, its K/V the cache), then steps on x[start:] (prefix) or x[start:end] (dual)."""
    P = len(prompt)
    x = list(prompt) + [mask_id] * GEN
    T = len(x)
    for b in range(GEN // BLOCK):
        s, e = P + b * BLOCK, P + (b + 1) * BLOCK
        n = sum(t == mask_id for t in x[s:e])
        schedule = [n // STEPS + (1 if i < n % STEPS else 0) for i in range(STEPS)]
        full, kv = llada_layers(cfg, W, x, 0, T)
        logits, i = full[s:e], 0
        while True:
            logits = logits.clone()
            logits[:, banned] = float("-inf")
            p = logits.double().softmax(-1)
            conf, x0 = p.max(-1)
            masked = [k for k in range(BLOCK) if x[s + k] == mask_id]
            for k in sorted(masked, key=lambda k: (-conf[k].item(), k))[: schedule[i]]:
                x[s + k] = int(x0[k])
            i += 1
            if mask_id not in x[s:e]:
                break
            logits = llada_layers(cfg, W, x, s, T if mode == "prefix" else e, past=kv)[0][:BLOCK]
    return x[P:]


def cut(tokens: list[int], eos_ids) -> list[int]:
    ends = [i for i, t in enumerate(tokens) if t in eos_ids]
    return tokens[: ends[0] + 1] if ends else tokens


@pytest.mark.parametrize("mode", MODES)
def test_token_exact_against_fast_dllm_v1_loop(llada, mode):
    engine, cfg, W = llada
    ids = encode_prompts(engine.tokenizer, PROMPTS)
    banned = list(engine.ids.banned)
    want = [cut(fast_dllm_generate(cfg, W, p, mode, engine.mask_id, banned), engine.ids.eos_ids) for p in ids]
    got = [g.token_ids for g in engine.generate_ids(ids, config(mode))]  # one batch, left padded
    assert got == want and max(map(len, want)) > BLOCK  # answers span several windows


# ---------------------------------------------------------------- drift from exact

def agreement(a: list[int], b: list[int]) -> tuple[int, int]:
    """(positions where the two answers hold the same token, positions either answer has)."""
    n = max(len(a), len(b))
    return sum(i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)), n


DRIFT_PROMPTS = [f"{a} + {b} =" for a in range(8) for b in range(3)]


@pytest.mark.parametrize("mode", MODES)
def test_drift_from_exact_is_measured(llada, mode, capsys):
    """The number docs/MODELS.md quotes: answer-token agreement with the exact mode on the LLaDA fixture
    (24 prompts, 3 windows of 4, 2 steps per window, greedy). Approximate, so not 1 in general; the
    bounds only keep the documented number honest."""
    engine = llada[0]
    exact = engine.generate(DRIFT_PROMPTS, config("none"))
    cached = engine.generate(DRIFT_PROMPTS, config(mode))
    same, total = map(sum, zip(*(agreement(a.token_ids, b.token_ids) for a, b in zip(exact, cached))))
    rows = sum(a.token_ids == b.token_ids for a, b in zip(exact, cached))
    with capsys.disabled():
        print(f"\n{mode}: token agreement {same}/{total} = {same / total:.3f}, identical answers "
              f"{rows}/{len(DRIFT_PROMPTS)}")
    assert same < total  # it is an approximation: on this fixture it does drift
    assert same / total >= DOCUMENTED[mode] - 0.005


DOCUMENTED = {"prefix": 0.523, "dual": 0.538}  # measured (this test prints it), docs/MODELS.md


# ---------------------------------------------------------------- refused by name

@pytest.mark.parametrize("layout", ["prompt_block", "absolute_grid"])
def test_cache_modes_need_the_full_sequence_layout(layout):
    with pytest.raises(ValueError, match=rf"full_sequence_cache 'dual' .*needs layout 'full_sequence', got '{layout}'"):
        config("dual", layout=layout).validate()
    with pytest.raises(ValueError, match=r"unknown full_sequence_cache 'both'"):
        config("both").validate()


def test_guidance_with_a_cache_is_refused(llada):
    with pytest.raises(ValueError, match=r"cfg_scale with full_sequence_cache='prefix'"):
        llada[0].generate(["hi"], config("prefix", cfg_scale=1.0))


def test_cli_names_the_mode(tmp_path, capsys):
    d, _ = write_llada(tmp_path / "m")
    assert main(["generate", "--model", str(d), "hi", "--max-new-tokens", "8", "--block-len", "4",
                 "--rule", "topk", "--steps-per-block", "2", "--full-sequence-cache", "dual"]) == 0
    assert main(["generate", "--model", str(d), "hi", "--full-sequence-cache", "both"]) == 2
    assert "unknown full_sequence_cache 'both'" in capsys.readouterr().err
    tok = CharTokenizer()  # an orl checkpoint of the prompt-block layout: refused by name after the load
    block = save_checkpoint(random_model(1, vocab_size=tok.vocab_size), tok, tmp_path / "block", {"block_len": 4})
    assert main(["generate", "--model", str(block), "hi", "--full-sequence-cache", "prefix"]) == 2
    assert "needs layout 'full_sequence', got 'prompt_block'" in capsys.readouterr().err
