"""LLaDA2.1 token editing and Fast-dLLM v2 sub-blocks as commit rules of the engine (issue 18 item 3),
token-exact against references written here from the published loops, on the same model (so the same
logits), every step recomputed over the absolute grid (prompt blocks block-causal; the KV cache is exact):
- LLaDA2.1 generate() (inclusionAI LLaDA2.1-mini modeling_llada2_moe.py): per block, loop: a step begun
  without masks is a post step, the block ends before post step max_post_steps + 1; mask-to-token: the
  masked positions with p > threshold when at least num_to_transfer are, else the num_to_transfer most
  confident; token-to-token: every committed non-prompt position of the block whose proposal differs,
  with p > editing_threshold; a post step that edits nothing ends the block = rule 'llada21';
- Fast-dLLM v2 batch_sample (NVlabs/Fast-dLLM v2/generation_functions.py, no block cache): a block's
  first token is the greedy AR prediction off the previous position (after the prefill of whole prompt
  blocks, and after each block's commit forward); then the sub-blocks of small_block_size in order, each
  until resolved: p > threshold, at least the argmax = rule 'fast_dllm_v2'.
Both read p from the sampling distribution (confidence 'sampled_prob'). Sampled runs draw by Gumbel-max
from the engine's counter-based noise in the references too (the published loops draw from torch's
generator: the same distribution). As in the SDAR references, the answer stops at max_new_tokens (the
published loops decode the last block whole) and after the block holding an EOS; top_p / top_k are not
applied except where a test says so (top_k / top_p: LLaDA2.x's _top_k_logits / _top_p_logits)."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.commit import above_or_top, fast_dllm_v2_rule, llada21_edit_rule
from orl.engine.decode import ar_first_token, post_steps
from orl.engine.sampling import hash_uniform, top_k_top_p
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_no_sync import NoHostSync

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()
MASK = TOK.mask_id
L, MAX_NEW = 8, 19
PROMPTS = ["hi", "abcdefgh", "hello world!1234", "x = 1 + 2"]  # tails 2, 0 (= L), 0 (2 L), 1
COUNT = {"edits": 0, "post": 0, "ar": 0}  # what the references did (so the tests cover it)


# ---------------------------------------------------------------- hand-checked rule cases

def t(*v, dtype=None):
    return torch.tensor([list(v)], dtype=dtype)


def test_llada21_mask_to_token_by_hand():
    conf, cand = t(0.95, 0.2, 0.7, 0.99), t(True, True, True, False)
    assert above_or_top(conf, cand, 0.9, 1).tolist() == [[True, False, False, False]]   # one above: enough
    assert above_or_top(conf, cand, 0.95, 1).tolist() == [[True, False, False, False]]  # none above (strict): top 1
    assert above_or_top(conf, cand, 0.9, 2).tolist() == [[True, False, True, False]]    # 1 < 2 above: top 2
    assert above_or_top(conf, cand, 0.1, 2).tolist() == [[True, True, True, False]]     # 3 >= 2 above: all 3
    assert above_or_top(conf, cand, 0.9, torch.tensor(5)).tolist() == [[True, True, True, False]]  # k > masked


def test_llada21_token_to_token_by_hand():
    x, canvas = t(5, 6, 7, 8), t(5, 9, 7, 1)
    editable = t(True, True, True, False)
    conf = t(0.99, 0.95, 0.99, 0.99)
    # 0 and 2 propose their own token, 3 is a prompt / masked position: only 1 is re-edited
    assert llada21_edit_rule(conf, x, canvas, editable, 0.9).tolist() == [[False, True, False, False]]
    assert not llada21_edit_rule(conf, x, canvas, editable, 0.95).any()  # strictly above


def test_llada21_post_steps_by_hand():
    """The block loop of LLaDA2.1 generate() with max_post_steps 2: (a) the step that commits the last
    mask, (b) a post step that edits, (c) a post step that edits, then the block ends (post 3 > 2);
    a post step without an edit ends it at once."""
    st = SimpleNamespace(unresolved=t(True, False), post=torch.zeros(1, dtype=torch.long),
                         open=torch.tensor([True]), knobs=SimpleNamespace(max_post_steps=torch.tensor(2)))
    none, some = t(False, False), t(False, True)

    def step(edit, after):
        post_steps(st, st.open.clone(), edit, after)
        st.unresolved = after
        return bool(st.open), int(st.post)

    assert step(none, t(False, False)) == (True, 1)   # (a) last mask committed: post step 1 follows
    assert step(some, t(False, False)) == (True, 2)   # (b)
    assert step(some, t(False, False)) == (False, 3)  # (c) post step 3 would exceed 2
    st.open, st.post, st.unresolved = torch.tensor([True]), torch.zeros(1, dtype=torch.long), t(False, False)
    assert step(none, t(False, False)) == (False, 0)  # a post step with no edit: done
    st.knobs.max_post_steps = torch.tensor(0)
    st.open, st.post, st.unresolved = torch.tensor([True]), torch.zeros(1, dtype=torch.long), t(True, False)
    assert step(some, t(False, False)) == (False, 1)  # max_post_steps 0: no step after the last mask


def test_fast_dllm_v2_sub_blocks_by_hand():
    conf = t(0.95, 0.5, 0.99, 0.99)
    # sub-block 0 still holds a mask (position 1): only it decodes, its argmax at least
    assert fast_dllm_v2_rule(conf, t(False, True, True, True), 0.9, 2).tolist() == [[False, True, False, False]]
    # sub-block 0 resolved: sub-block 1, both above tau
    assert fast_dllm_v2_rule(conf, t(False, False, True, True), 0.9, 2).tolist() == [[False, False, True, True]]
    # strictly above: 0.99 is not > 0.99, the argmax (lower index among ties) still commits
    assert fast_dllm_v2_rule(conf, t(False, False, True, True), 0.99, torch.tensor(2)).tolist() == \
        [[False, False, True, False]]
    # one sub-block of the whole length: the threshold rule over every mask
    assert fast_dllm_v2_rule(conf, t(True, True, True, True), 0.9, 4).tolist() == [[True, False, True, True]]
    assert not fast_dllm_v2_rule(conf, t(False, False, False, False), 0.9, 2).any()


# ---------------------------------------------------------------- references of the published loops

def block_logits(model, seq, lo, hi, banned):
    """Logits [hi - lo, V] of positions lo..hi of seq[:hi] under the block-causal grid mask (a shifted
    model reads position i off i - 1)."""
    T = hi
    block = torch.arange(T) // L
    mask = (block[None, :] <= block[:, None])[None]
    with torch.no_grad():
        h = model(torch.tensor([seq[:T]]), torch.arange(T)[None], mask, return_hidden=True)
        logits = model.read_out(h, read_from=(torch.arange(T) - 1).clamp(min=0))[0, lo:hi]
    logits[:, banned] = float("-inf")
    return logits


def published_top_k(logits, k):
    """LLaDA2.x `_top_k_logits`: below the k-th largest value -> -inf."""
    if k is None or k <= 0:
        return logits
    kth = torch.topk(logits, k).values[..., -1, None]
    return torch.where(logits < kth, torch.full_like(logits, float("-inf")), logits)


def published_top_p(logits, p):
    """LLaDA2.x `_top_p_logits`: sort descending, drop where the cumulative softmax exceeds p, shifted
    right by one so the first token over p stays."""
    if p is None or p >= 1.0:
        return logits
    sorted_logits, sorted_indices = torch.sort(logits, descending=True)
    remove = torch.cumsum(torch.softmax(sorted_logits, -1), -1) > p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    mask = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, sorted_indices, remove)
    return logits.masked_fill(mask, float("-inf"))


def draw(logits, temperature, seed, gstep, top_k=0, top_p=1.0):
    """x0 and its probability under softmax(logits / T) (T = 0: argmax of softmax(logits)); sampling
    from the top-k, then top-p truncated distribution as LLaDA2.x's _sample_with_temperature_topk_topp."""
    if temperature == 0:
        x0 = logits.argmax(-1)
    else:  # the engine's noise covers the whole [L] canvas
        logits = published_top_p(published_top_k(logits / temperature, top_k), top_p) * temperature
        u = hash_uniform(torch.tensor([seed]), torch.tensor([gstep]), L, logits.shape[-1])[0, : logits.shape[0]]
        x0 = (logits.float() / temperature - torch.log(-torch.log(u))).argmax(-1)
    p = torch.softmax(logits / temperature if temperature > 0 else logits, -1)
    return x0, p.gather(-1, x0[:, None]).squeeze(-1)


def truncate(answer):
    return answer[: answer.index(TOK.eos_id) + 1] if TOK.eos_id in answer else answer


def llada21_generate(model, prompt, banned, tau, edit_tau, max_post, n_transfer, temperature=0.0, seed=0,
                     top_k=0, top_p=1.0):
    n, end = len(prompt), len(prompt) + MAX_NEW
    seq = list(prompt) + [MASK] * MAX_NEW
    gstep = 0
    for k in range(n // L, -(-end // L)):
        lo, hi = k * L, min((k + 1) * L, end)
        post = 0
        while True:
            old = seq[lo:hi]
            active = [j for j in range(hi - lo) if old[j] == MASK]
            if not active:
                post += 1
            if post > max_post:
                break
            x0, x0_p = draw(block_logits(model, seq, lo, hi, banned), temperature, seed, gstep, top_k, top_p)
            transfer = []
            if active:
                conf = torch.full((hi - lo,), -torch.inf)
                conf[active] = x0_p[active]
                high = [j for j in range(hi - lo) if conf[j] > tau]
                transfer = high if len(high) >= n_transfer else \
                    torch.topk(conf, min(n_transfer, len(active))).indices.tolist()
            editable = [j for j in range(hi - lo) if lo + j >= n and old[j] != MASK]
            edits = [j for j in editable if x0_p[j] > edit_tau and int(x0[j]) != old[j]]
            for j in set(transfer) | set(edits):
                seq[lo + j] = int(x0[j])
            COUNT["edits"] += len(edits)
            COUNT["post"] += not active
            gstep += 1
            if not active and not edits:
                break
        if TOK.eos_id in seq[n:hi]:
            return truncate(seq[n:hi])
    return seq[n:end]


def v2_generate(model, prompt, banned, tau, sub, temperature=0.0, seed=0):
    n, end = len(prompt), len(prompt) + MAX_NEW
    seq = list(prompt) + [MASK] * MAX_NEW
    gstep = 0
    for k in range(n // L, -(-end // L)):
        lo, hi = k * L, min((k + 1) * L, end)
        if lo >= n:  # the block starts with an answer position: its AR token, off position lo - 1
            seq[lo] = int(block_logits(model, seq, lo, hi, banned)[0].argmax())
            COUNT["ar"] += 1
        for s in range(0, L, sub):
            a, b = lo + s, min(lo + s + sub, hi)
            while any(seq[i] == MASK for i in range(a, b)):
                x0, x0_p = draw(block_logits(model, seq, lo, hi, banned), temperature, seed, gstep)
                conf = torch.tensor([float(x0_p[i - lo]) if a <= i < b and seq[i] == MASK else -torch.inf
                                     for i in range(lo, hi)])
                unmask = conf > tau
                unmask[conf.argmax()] = True
                for j in range(hi - lo):
                    if unmask[j] and seq[lo + j] == MASK:
                        seq[lo + j] = int(x0[j])
                gstep += 1
        if TOK.eos_id in seq[n:hi]:
            return truncate(seq[n:hi])
    return seq[n:end]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "shifted"])
def engine(request):
    model = random_model(3, vocab_size=TOK.vocab_size, eos_bias=-2.0, learned_pos=False, adapter_dim=0,
                         shift_logits=request.param)
    return Engine(model, TOK)


@pytest.fixture(scope="module")
def shifted():
    return Engine(random_model(4, vocab_size=TOK.vocab_size, eos_bias=-2.0, learned_pos=False, adapter_dim=0,
                               shift_logits=True), TOK)


def llada21_cfg(tau, edit_tau, max_post, n_transfer, **kw):
    return DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, rule="llada21", confidence="sampled_prob",
                        threshold=tau, editing_threshold=edit_tau, max_post_steps=max_post,
                        num_to_transfer=n_transfer, layout="absolute_grid", eos_fill=False, **kw)


@pytest.mark.parametrize("tau,edit_tau,max_post,n_transfer", [
    (0.5, 0.0, 16, 1),   # S mode: aggressive M2T, every changed proposal re-edits
    (0.7, 0.5, 16, 1),   # Q mode
    (0.9, 0.3, 2, 2),    # few post steps, two M2T commits at least
    (0.5, 0.0, 0, 1)])   # no post step: edits only while masks remain
def test_llada21_generate(engine, tau, edit_tau, max_post, n_transfer):
    banned = list(engine.ids.banned)
    COUNT.update(edits=0, post=0)
    want = [llada21_generate(engine.model, TOK.encode(p), banned, tau, edit_tau, max_post, n_transfer) for p in PROMPTS]
    got = [g.token_ids for g in engine.generate(PROMPTS, llada21_cfg(tau, edit_tau, max_post, n_transfer))]
    assert got == want
    assert any(len(w) > L for w in want)
    assert COUNT["edits"] > 0  # the token-to-token half decided tokens
    assert (COUNT["post"] > 0) == (max_post > 0)


def test_llada21_sampled_and_fused_or_not(engine):
    banned = list(engine.ids.banned)
    for fused in (True, False):
        cfg = llada21_cfg(0.5, 0.2, 4, 1, temperature=0.8, seed=5, fused_commit=fused)
        for p in PROMPTS[:3]:
            want = llada21_generate(engine.model, TOK.encode(p), banned, 0.5, 0.2, 4, 1, 0.8, seed=5)
            assert engine.generate([p], cfg)[0].token_ids == want


@pytest.mark.parametrize("top_k,top_p", [(6, 1.0), (0, 0.8), (10, 0.9)])
def test_llada21_sampled_top_k_top_p(engine, top_k, top_p):
    banned = list(engine.ids.banned)
    cfg = llada21_cfg(0.5, 0.2, 4, 1, temperature=1.3, seed=9, top_k=top_k, top_p=top_p)
    for p in PROMPTS[:3]:
        want = llada21_generate(engine.model, TOK.encode(p), banned, 0.5, 0.2, 4, 1, 1.3, 9, top_k, top_p)
        assert engine.generate([p], cfg)[0].token_ids == want
    plain = dataclasses.replace(cfg, top_k=0, top_p=1.0)
    assert [g.token_ids for g in engine.generate(PROMPTS, cfg)] != [g.token_ids for g in engine.generate(PROMPTS, plain)]


def test_top_k_top_p_by_hand():
    logits = torch.tensor([[[3.0, 2.0, 1.0, 0.0]]])  # softmax: 0.644 0.237 0.087 0.032 (cum .644 .881 .968 1)

    def kept(**kw):
        return torch.isfinite(top_k_top_p(logits, **kw))[0, 0].tolist()

    assert kept(temperature=1.0, top_k=2, top_p=1.0) == [True, True, False, False]
    assert kept(temperature=1.0, top_k=0, top_p=0.5) == [True, False, False, False]   # the first over p stays
    assert kept(temperature=1.0, top_k=0, top_p=0.9) == [True, True, True, False]
    assert kept(temperature=1.0, top_k=0, top_p=1.0) == [True] * 4                    # off
    # top_p over what top_k left: .731 .269
    assert kept(temperature=1.0, top_k=2, top_p=0.7) == [True, False, False, False]
    assert kept(temperature=1.0, top_k=2, top_p=0.75) == [True, True, False, False]
    assert kept(temperature=1.0, top_k=torch.tensor(3), top_p=torch.tensor(0.6)) == [True, False, False, False]
    # the nucleus of softmax(logits / T): T = 4 flattens it to .35 .27 .21 .17
    assert kept(temperature=4.0, top_k=0, top_p=0.5) == [True, True, False, False]


def test_llada21_edits_change_the_answer(engine):
    """Editing off (editing_threshold 1: no p exceeds it) is SDAR's dynamic rule with a floor of
    num_to_transfer; the edits must change at least one answer."""
    base = llada21_cfg(0.5, 0.0, 16, 1)
    off = dataclasses.replace(base, editing_threshold=1.0)
    assert [g.token_ids for g in engine.generate(PROMPTS, base)] != [g.token_ids for g in engine.generate(PROMPTS, off)]


def v2_cfg(tau, sub, **kw):
    return DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, rule="fast_dllm_v2", confidence="sampled_prob",
                        threshold=tau, small_block_size=sub, layout="absolute_grid", eos_fill=False, **kw)


@pytest.mark.parametrize("tau,sub", [(0.9, 4), (0.5, 2), (0.7, 8)])
def test_fast_dllm_v2_batch_sample(shifted, tau, sub):
    banned = list(shifted.ids.banned)
    COUNT["ar"] = 0
    want = [v2_generate(shifted.model, TOK.encode(p), banned, tau, sub) for p in PROMPTS]
    got = [g.token_ids for g in shifted.generate(PROMPTS, v2_cfg(tau, sub))]
    assert got == want
    assert any(len(w) > L for w in want) and COUNT["ar"] > len(PROMPTS)  # AR tokens after the prompt and blocks


def test_fast_dllm_v2_sampled(shifted):
    banned = list(shifted.ids.banned)
    for p in PROMPTS:
        want = v2_generate(shifted.model, TOK.encode(p), banned, 0.7, 4, 0.8, seed=7)
        assert shifted.generate([p], v2_cfg(0.7, 4, temperature=0.8, seed=7))[0].token_ids == want


def test_fast_dllm_v2_sub_blocks_and_ar_token_matter(shifted):
    outs = {sub: [g.token_ids for g in shifted.generate(PROMPTS, v2_cfg(0.5, sub))] for sub in (2, 8)}
    assert outs[2] != outs[8]
    plain = [g.token_ids for g in shifted.generate(PROMPTS, dataclasses.replace(v2_cfg(0.5, 8), rule="threshold"))]
    assert plain != outs[8]  # the same threshold without the AR first token (and with >=): another decode


@pytest.mark.parametrize("rule", ["llada21", "fast_dllm_v2"])
def test_chunks_traces_and_eos_fill_keep_the_decode(shifted, rule):
    """Chunks of 3 steps (the steps after a row's block is done are no-ops: llada21's closed rows too),
    traces (one step per host check; llada21's edit-only steps are recorded) give the same tokens and
    steps per block."""
    cfg = llada21_cfg(0.5, 0.0, 3, 1) if rule == "llada21" else v2_cfg(0.7, 4)
    base = shifted.generate(PROMPTS, cfg)
    chunked = shifted.generate(PROMPTS, dataclasses.replace(cfg, chunk_steps=3))
    traced = shifted.generate(PROMPTS, cfg, trace=True)
    for b, c, t in zip(base, chunked, traced):
        assert (b.token_ids, b.block_steps) == (c.token_ids, c.block_steps) == (t.token_ids, t.block_steps)
        assert len(t.trace) == sum(t.block_steps)
    if rule == "llada21":  # some recorded step re-edited a committed token
        assert any(bool((r.committed & ~r.unresolved).any()) for t in traced for r in t.trace)


def test_fast_dllm_v2_refuses_an_unshifted_model():
    eng = Engine(random_model(3, vocab_size=TOK.vocab_size, learned_pos=False, adapter_dim=0), TOK)
    with pytest.raises(ValueError, match="fast_dllm_v2.*shifted"):
        eng.generate(["hi"], v2_cfg(0.9, 4))


@pytest.mark.parametrize("bad,match", [
    (dict(rule="fast_dllm_v2", small_block_size=3), "small_block_size"),
    (dict(rule="llada21", layout="full_sequence"), "block layouts"),
    (dict(editing_threshold=1.5), "editing_threshold"), (dict(max_post_steps=-1), "max_post_steps"),
    (dict(num_to_transfer=0), "num_to_transfer"), (dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(alg_temp=0.5), "alg_temp")])  # top_k / top_p run in full_sequence too (tests/test_dream_sampling_knobs.py)
def test_bad_settings_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(DecodeConfig(block_len=8), **bad).validate()


def test_ar_first_token_has_no_host_sync(shifted):
    cfg = v2_cfg(0.9, 4)
    st, P = shifted.setup([TOK.encode(p) for p in PROMPTS[:2]], cfg)
    shifted.begin_block(st, cfg, P, 0, [True, True])
    st.unresolved[:, 0] = True
    with torch.no_grad(), NoHostSync():
        ar_first_token(shifted.model, st, shifted.ids, eos_fill=True)
    assert not st.unresolved[:, 0].any()


def test_manifest_sub_block_is_the_default():
    assert DecodeConfig.from_manifest({"sub_block_len": 4, "block_len": 16}).small_block_size == 4
    assert DecodeConfig.from_manifest({}).small_block_size == 8


# ---------------------------------------------------------------- `orl generate` on the family fixtures

@pytest.mark.parametrize("family,flags", [
    ("fast_dllm_v2", ["--rule", "fast_dllm_v2", "--small-block-size", "4", "--block-len", "8"]),
    ("llada2_moe", ["--rule", "llada21", "--confidence", "sampled_prob", "--threshold", "0.7",
                    "--editing-threshold", "0.5", "--max-post-steps", "4", "--num-to-transfer", "1"])])
def test_orl_generate_runs(tmp_path, capsys, family, flags):
    pytest.importorskip("transformers")
    from family_fixtures import WRITERS
    from orl.cli import main

    WRITERS[family](tmp_path / family)
    assert main(["generate", "--model", str(tmp_path / family), "def f(x):", "--max-new-tokens", "12", *flags]) == 0
    out = capsys.readouterr().out
    assert flags[1] in out and "tokens:" in out


def test_orl_generate_checks_small_block_size_against_the_checkpoints_block(tmp_path, capsys):
    """--small-block-size 32 divides the fixture's block of 32 (its bd_size): the early flag check must
    not hold it against the class default block of 16 (it refused it before the weights loaded)."""
    pytest.importorskip("transformers")
    from family_fixtures import WRITERS
    from orl.cli import main

    WRITERS["fast_dllm_v2"](tmp_path / "v2")
    args = ["generate", "--model", str(tmp_path / "v2"), "def f(x):", "--max-new-tokens", "4", "--rule", "fast_dllm_v2"]
    assert main([*args, "--small-block-size", "32"]) == 0
    assert "block 32" in capsys.readouterr().out
    assert main([*args, "--small-block-size", "12"]) == 2  # does not divide 32: still refused, by name
    assert "small_block_size" in capsys.readouterr().err


def test_a_block_its_ar_first_token_resolves_takes_no_step(shifted):
    """A block of one answer position (max_new_tokens = L + 1) is resolved by its AR first token: no
    denoising step runs for it. With steps streamed this raised IndexError (no record of the block's
    first row) or passed on the previous block's last record as a step of this block."""
    from orl.engine import StepEvent

    cfg = DecodeConfig(block_len=L, max_new_tokens=L + 1, rule="fast_dllm_v2", small_block_size=4, eos_fill=False)
    events = list(shifted.stream("hi", cfg, steps=True))
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert steps and all(e.block == e.record.block == 0 for e in steps)
    gen = shifted.generate(["hi"], cfg)[0]
    assert events[-1].generations[0].token_ids == gen.token_ids
    assert len(gen.token_ids) == L + 1 and gen.block_steps == [len(steps), 0]
    assert gen.step_forwards == len(steps)  # no forward spent on the resolved block
    one = list(shifted.stream("hi", dataclasses.replace(cfg, max_new_tokens=1), steps=True))
    assert not any(isinstance(e, StepEvent) for e in one) and len(one[-1].generations[0].token_ids) == 1
