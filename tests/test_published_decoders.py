"""The published decoders as commit rules of the engine (issue 18 item 3), each token-exact against a
reference written here from the published loop, on the same model and so the same logits:
- Dream's diffusion_generate (DreamLM/Dream generation_utils.py `_sample`): algorithms maskgit_plus,
  topk_margin and entropy = rule 'dream' with confidence sampled_prob / margin / neg_entropy, in the
  full-sequence layout with one window (block_len = max_new_tokens), shifted read-out;
- SDAR's block_diffusion_generate (JetAstra/SDAR generate.py): low_confidence_static / _dynamic =
  rules 'sdar_static' / 'sdar_dynamic' with confidence sampled_prob, on the absolute grid.
Sampling: the published loops draw from torch's generator (Categorical / multinomial); the references
draw the same distribution by Gumbel-max from the engine's counter-based noise (orl.engine.sampling),
so sampled runs are compared token for token too, SDAR's with top_k / top_p as well (its
top_k_logits / top_p_logits). Dream's top_p / top_k / alg_temp: tests/test_dream_sampling_knobs.py.
Not covered: SDAR's 'sequential'."""
import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.commit import dream_timestep
from orl.engine.sampling import hash_uniform
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()
PROMPTS = ["hi", "hello world", "x = 1"]


def logits_at(model, seq: list[int], mask: torch.Tensor, banned: list[int]) -> torch.Tensor:
    """Logits [T, V] of every position of seq (a shifted model reads position i off i - 1)."""
    T = len(seq)
    with torch.no_grad():
        h = model(torch.tensor([seq]), torch.arange(T)[None], mask, return_hidden=True)
        logits = model.read_out(h, read_from=(torch.arange(T) - 1).clamp(min=0))[0]
    logits[:, banned] = float("-inf")
    return logits


def sample(logits: torch.Tensor, temperature: float, seed: int, step: int) -> torch.Tensor:
    """The token each row of logits [N, V] draws: argmax when greedy, else a draw of softmax(logits / T)."""
    if temperature == 0:
        return logits.argmax(-1)
    u = hash_uniform(torch.tensor([seed]), torch.tensor([step]), *logits.shape)[0]
    return (logits.float() / temperature - torch.log(-torch.log(u))).argmax(-1)


def truncate(answer: list[int]) -> list[int]:
    return answer[: answer.index(TOK.eos_id) + 1] if TOK.eos_id in answer else answer


# ---------------------------------------------------------------- Dream

def dream_generate(model, prompt, banned, gen, steps, alg, temperature=0.0, seed=0, eps=1e-3):
    """Dream `_sample` for one row: every step the whole sequence, logits shifted right by one; confidence
    of the masked positions from sample_tokens; number_transfer_tokens = int(num_mask (1 - s / t)) (all
    at the last step), the most confident by topk."""
    x = torch.tensor(list(prompt) + [TOK.mask_id] * gen)
    T, P = len(x), len(prompt)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = x == TOK.mask_id
        logits = logits_at(model, x.tolist(), torch.ones(1, T, T, dtype=torch.bool), banned)
        mask_logits = logits[mask_index]
        probs = torch.softmax(mask_logits / temperature if temperature > 0 else mask_logits, -1)
        # each masked position's draw uses the noise of its answer position at step i (as the engine)
        x0 = sample(logits[P:], temperature, seed, i)[mask_index[P:]]
        if alg == "maskgit_plus":
            confidence = probs.gather(-1, x0[:, None]).squeeze(-1)
        elif alg == "topk_margin":
            sp = probs.sort(-1, descending=True).values
            confidence = sp[:, 0] - sp[:, 1]
        else:  # entropy
            confidence = (probs * torch.log(probs + 1e-10)).sum(-1)
        num_mask_token = mask_index.sum() / 1
        t, s = timesteps[i], timesteps[i + 1]
        n = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
        full_confidence = torch.full((T,), -torch.inf)
        full_confidence[mask_index] = confidence
        if n > 0:
            idx = torch.topk(full_confidence, n).indices
            x_ = torch.full_like(x, TOK.mask_id)
            x_[mask_index] = x0
            x[idx] = x_[idx]
    return truncate(x[P:].tolist())


ALGS = {"maskgit_plus": "sampled_prob", "topk_margin": "margin", "entropy": "neg_entropy"}


def test_dream_timestep_is_torch_linspace_bit_for_bit():
    for S in list(range(1, 200)) + [256, 511, 512, 1000]:
        i = torch.arange(S + 1)
        assert torch.equal(dream_timestep(i, S), torch.linspace(1, 1e-3, S + 1)), S
        assert torch.equal(dream_timestep(i, torch.tensor(S)), torch.linspace(1, 1e-3, S + 1)), S


@pytest.fixture(scope="module")
def dream_engine():
    model = random_model(7, vocab_size=TOK.vocab_size, eos_bias=-2.0, adapter_dim=0, learned_pos=False,
                         shift_logits=True)
    return Engine(model, TOK)


@pytest.mark.parametrize("steps", [10, 4])  # 10 = one per token: Dream's schedule then lags (step 0 commits none)
@pytest.mark.parametrize("alg", list(ALGS))
def test_dream_diffusion_generate(dream_engine, alg, steps):
    GEN = 10
    cfg = DecodeConfig(block_len=GEN, max_new_tokens=GEN, rule="dream", confidence=ALGS[alg], steps_per_block=steps,
                       layout="full_sequence", eos_fill=False)
    banned = list(dream_engine.ids.banned)
    want = [dream_generate(dream_engine.model, TOK.encode(p), banned, GEN, steps, alg) for p in PROMPTS]
    assert [g.token_ids for g in dream_engine.generate(PROMPTS, cfg)] == want  # batched, left padded
    if steps == GEN:
        assert [g.block_steps[0] for g in dream_engine.generate(PROMPTS[:1], cfg)] == [GEN]


@pytest.mark.parametrize("alg", list(ALGS))
def test_dream_sampled(dream_engine, alg):
    GEN, steps, T = 10, 5, 0.8
    cfg = DecodeConfig(block_len=GEN, max_new_tokens=GEN, rule="dream", confidence=ALGS[alg], steps_per_block=steps,
                       layout="full_sequence", eos_fill=False, temperature=T, seed=11)
    banned = list(dream_engine.ids.banned)
    for p in PROMPTS[:2]:
        want = dream_generate(dream_engine.model, TOK.encode(p), banned, GEN, steps, alg, T, seed=11)
        assert dream_engine.generate([p], cfg)[0].token_ids == want


def test_dream_orderings_differ(dream_engine):
    """The three confidences are different orderings: on this model each decodes differently, so the
    exactness tests above could tell them apart."""
    outs = {alg: tuple(tuple(g.token_ids) for g in dream_engine.generate(PROMPTS, DecodeConfig(
        block_len=10, max_new_tokens=10, rule="dream", confidence=c, steps_per_block=10, layout="full_sequence",
        eos_fill=False))) for alg, c in ALGS.items()}
    assert len(set(outs.values())) == 3


# ---------------------------------------------------------------- SDAR

L, MAX_NEW = 4, 9
BRANCHES = {"threshold": 0, "floor": 0}  # which branch of low_confidence_dynamic the references took


def sdar_top_k_top_p(logits, k, p):
    """SDAR generate.py top_k_logits then top_p_logits (on logits / T): below the k-th value -> -inf;
    sorted descending, drop where the cumulative softmax exceeds p, shifted right by one."""
    if k > 0:
        logits = torch.where(logits < torch.topk(logits, k).values[..., -1, None], float("-inf"), logits)
    if p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        mask = torch.cumsum(torch.softmax(sorted_logits, -1), -1) > p
        mask[..., 1:] = mask[..., :-1].clone()
        mask[..., 0] = False
        logits = logits.masked_fill(torch.zeros_like(mask).scatter(-1, sorted_indices, mask), float("-inf"))
    return logits


def sdar_generate(model, prompt, banned, steps, strategy, tau=0.0, temperature=0.0, seed=0, top_k=0, top_p=1.0):
    """SDAR block_diffusion_generate for one row, recomputing every step (the KV cache is exact): the
    absolute grid, prompt blocks block-causal; per block up to `steps` steps, each transferring
    get_num_transfer_tokens(block_length, steps)[step] positions. Greedy is the T -> 0 limit (SDAR's
    sampler divides by T). Where SDAR's topk would take more positions than are masked (a first block
    holding a prompt tail), it rewrites fixed tokens; this reference, like the engine, takes the masked
    ones only. The answer stops at max_new_tokens (SDAR decodes the last block whole) and after the
    block holding an EOS (SDAR's stopping_criteria_idx)."""
    n, end = len(prompt), len(prompt) + MAX_NEW
    seq = list(prompt) + [TOK.mask_id] * MAX_NEW
    schedule = [L // steps + (1 if i < L % steps else 0) for i in range(steps)]
    gstep = 0
    for k in range(n // L, -(-end // L)):
        lo, hi = k * L, min((k + 1) * L, end)
        for step in range(steps + 1):
            todo = [i for i in range(max(lo, n), hi) if seq[i] == TOK.mask_id]
            if not todo:
                break
            block = torch.arange(hi) // L
            logits = logits_at(model, seq[:hi], (block[None, :] <= block[:, None])[None], banned)[lo:hi]
            if temperature == 0:
                x0 = logits.argmax(-1)
            else:  # the engine's noise covers the whole [L] canvas
                logits = sdar_top_k_top_p(logits / temperature, top_k, top_p) * temperature
                u = hash_uniform(torch.tensor([seed]), torch.tensor([gstep]), L, logits.shape[-1])[0, : hi - lo]
                x0 = (logits.float() / temperature - torch.log(-torch.log(u))).argmax(-1)
            probs = torch.softmax(logits / temperature if temperature > 0 else logits, -1)
            x0_p = probs.gather(-1, x0[:, None]).squeeze(-1)
            conf = torch.full((hi - lo,), -torch.inf)
            conf[[i - lo for i in todo]] = x0_p[[i - lo for i in todo]]
            top = torch.topk(conf, min(schedule[step], len(todo))).indices.tolist()
            if strategy == "static":
                commit = top
            else:
                high = [j for j in range(hi - lo) if conf[j] > tau]
                BRANCHES["threshold" if len(high) >= schedule[step] else "floor"] += 1
                commit = high if len(high) >= schedule[step] else top
            for j in commit:
                seq[lo + j] = int(x0[j])
            gstep += 1
        if TOK.eos_id in seq[n:hi]:
            return truncate(seq[n:hi])
    return seq[n:end]


GRID_PROMPTS = ["hi", "abcd", "hello world", "x = 1 + 2"]  # tails 2, 0, 3, 1


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "shifted"])
def sdar_engine(request):
    model = random_model(3, vocab_size=TOK.vocab_size, eos_bias=-2.0, learned_pos=False, adapter_dim=0,
                         shift_logits=request.param)
    return Engine(model, TOK)


def sdar_cfg(strategy, steps, tau=0.9, **kw):
    return DecodeConfig(block_len=L, max_new_tokens=MAX_NEW, rule=f"sdar_{strategy}", confidence="sampled_prob",
                        steps_per_block=steps, threshold=tau, layout="absolute_grid", eos_fill=False, **kw)


@pytest.mark.parametrize("strategy,steps,tau", [("static", 2, 0.9), ("static", 3, 0.9), ("dynamic", 2, 0.5),
                                                ("dynamic", 4, 0.7)])
def test_sdar_block_diffusion_generate(sdar_engine, strategy, steps, tau):
    banned = list(sdar_engine.ids.banned)
    BRANCHES.update(threshold=0, floor=0)
    want = [sdar_generate(sdar_engine.model, TOK.encode(p), banned, steps, strategy, tau) for p in GRID_PROMPTS]
    got = [g.token_ids for g in sdar_engine.generate(GRID_PROMPTS, sdar_cfg(strategy, steps, tau))]
    assert got == want
    assert any(len(w) > L for w in want)
    if strategy == "dynamic":  # both the threshold and its per-step floor decided some steps
        assert BRANCHES["threshold"] and BRANCHES["floor"], BRANCHES


@pytest.mark.parametrize("strategy", ["static", "dynamic"])
def test_sdar_sampled(sdar_engine, strategy):
    banned = list(sdar_engine.ids.banned)
    cfg = sdar_cfg(strategy, 2, 0.5, temperature=0.8, seed=5)
    for p in GRID_PROMPTS[:2]:
        want = sdar_generate(sdar_engine.model, TOK.encode(p), banned, 2, strategy, 0.5, 0.8, seed=5)
        assert sdar_engine.generate([p], cfg)[0].token_ids == want


@pytest.mark.parametrize("top_k,top_p", [(4, 1.0), (0, 0.7), (8, 0.85)])
def test_sdar_sampled_top_k_top_p(sdar_engine, top_k, top_p):
    banned = list(sdar_engine.ids.banned)
    cfg = sdar_cfg("dynamic", 2, 0.5, temperature=1.2, seed=5, top_k=top_k, top_p=top_p)
    for p in GRID_PROMPTS:
        want = sdar_generate(sdar_engine.model, TOK.encode(p), banned, 2, "dynamic", 0.5, 1.2, 5, top_k, top_p)
        assert sdar_engine.generate([p], cfg)[0].token_ids == want


def test_cli_generate_runs_a_published_decoder(tmp_path, capsys):
    from orl.checkpoint import save_checkpoint
    from orl.cli import main

    model = random_model(3, vocab_size=TOK.vocab_size, learned_pos=False, adapter_dim=0)
    save_checkpoint(model, TOK, tmp_path / "m", {"block_len": 4, "layout": "absolute_grid"})
    assert main(["generate", "--model", str(tmp_path / "m"), "hi", "--rule", "sdar_dynamic", "--confidence",
                 "sampled_prob", "--steps-per-block", "2", "--threshold", "0.5", "--max-new-tokens", "6"]) == 0
    assert "sdar_dynamic" in capsys.readouterr().out


# ---------------------------------------------------------------- LLaDA classifier-free guidance

def llada_generate_cfg(model, prompt, banned, gen, block, steps, scale):
    """LLaDA generate() with cfg_scale (greedy, low_confidence remasking, semi-AR blocks): per step the
    logits of x and of un_x (x with every prompt token masked), combined as un + (scale + 1)(c - un);
    each block's get_num_transfer_tokens schedule; the most confident masked positions of the block."""
    x = torch.tensor(list(prompt) + [TOK.mask_id] * gen)
    P, T = len(prompt), len(prompt) + gen
    prompt_index = x != TOK.mask_id
    full = torch.ones(1, T, T, dtype=torch.bool)
    for b in range(-(-gen // block)):
        s, e = P + b * block, min(P + (b + 1) * block, T)
        n = int((x[s:e] == TOK.mask_id).sum())
        schedule = [n // steps + (1 if i < n % steps else 0) for i in range(steps)]
        for i in range(steps):
            mask_index = x == TOK.mask_id
            un_x = x.clone()
            un_x[prompt_index] = TOK.mask_id
            with torch.no_grad():
                c, u = (logits_at(model, seq.tolist(), full, []) for seq in (x, un_x))
            logits = u + (scale + 1) * (c - u)
            logits[:, banned] = float("-inf")
            p = torch.softmax(logits, -1)
            x0 = logits.argmax(-1)
            x0_p = p.gather(-1, x0[:, None]).squeeze(-1)
            x0_p[e:] = -torch.inf
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            idx = torch.topk(confidence, schedule[i]).indices
            x[idx] = x0[idx]
    return truncate(x[P:].tolist())


@pytest.mark.parametrize("shift", [False, True], ids=["llada", "dream-body"])
def test_llada_classifier_free_guidance(shift):
    model = random_model(5, vocab_size=TOK.vocab_size, eos_bias=-2.0, adapter_dim=0, learned_pos=False,
                         shift_logits=shift)
    engine = Engine(model, TOK)
    banned = list(engine.ids.banned)
    cfg = DecodeConfig(block_len=4, max_new_tokens=10, rule="topk", steps_per_block=3, layout="full_sequence",
                       eos_fill=False, cfg_scale=1.5)
    want = [llada_generate_cfg(model, TOK.encode(p), banned, 10, 4, 3, 1.5) for p in PROMPTS]
    assert [g.token_ids for g in engine.generate(PROMPTS, cfg)] == want  # batched, left padded
    plain = [llada_generate_cfg(model, TOK.encode(p), banned, 10, 4, 3, 0.0) for p in PROMPTS]
    assert plain != want  # guidance changed the answer: the test can tell


def test_guidance_is_refused_outside_full_sequence():
    with pytest.raises(ValueError, match="cfg_scale must be >= 0 and needs layout 'full_sequence'"):
        DecodeConfig(cfg_scale=1.0).validate()


# ---------------------------------------------------------------- random orderings (LLaDA random, Dream origin)

def uniforms(seed: int, step: int, n: int) -> torch.Tensor:
    """The engine's 'random' scores of n window positions at a noise step (orl.engine.commit.rank_score)."""
    from orl.engine.commit import RANDOM_SALT
    return hash_uniform(torch.tensor([seed ^ RANDOM_SALT]), torch.tensor([step]), n, 1)[0, :, 0]


def dream_origin_generate(model, prompt, banned, gen, steps, seed, eps=1e-3):
    """Dream `_sample` alg='origin': per step, each masked position transfers with probability 1 - s / t
    (all at the last step), its token sampled (greedy here); torch.rand replaced by the engine's uniforms."""
    x = torch.tensor(list(prompt) + [TOK.mask_id] * gen)
    T, P = len(x), len(prompt)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = x == TOK.mask_id
        logits = logits_at(model, x.tolist(), torch.ones(1, T, T, dtype=torch.bool), banned)
        t, s = timesteps[i], timesteps[i + 1]
        p_transfer = 1 - s / t if i < steps - 1 else 1
        u = torch.zeros(T)
        u[P:] = uniforms(seed, i, gen)
        transfer = mask_index & (u < p_transfer)
        x[transfer] = logits.argmax(-1)[transfer]
    return truncate(x[P:].tolist())


def llada_random_generate(model, prompt, banned, gen, block, steps, seed):
    """LLaDA generate() with remasking='random': x0_p uniform instead of the confidence, then the same
    per-block topk schedule (the engine's noise step counts every step of the request)."""
    x = torch.tensor(list(prompt) + [TOK.mask_id] * gen)
    P, T = len(prompt), len(prompt) + gen
    full, gstep = torch.ones(1, T, T, dtype=torch.bool), 0
    for b in range(-(-gen // block)):
        s, e = P + b * block, min(P + (b + 1) * block, T)
        n = e - s
        schedule = [n // steps + (1 if i < n % steps else 0) for i in range(steps)]
        for i in range(steps):
            mask_index = x == TOK.mask_id
            x0 = logits_at(model, x.tolist(), full, banned).argmax(-1)
            x0_p = torch.full((T,), -torch.inf)
            x0_p[s:e] = uniforms(seed, gstep, e - s)
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            idx = torch.topk(confidence, schedule[i]).indices
            x[idx] = x0[idx]
            gstep += 1
    return truncate(x[P:].tolist())


def test_dream_origin(dream_engine):
    GEN, steps = 10, 4
    cfg = DecodeConfig(block_len=GEN, max_new_tokens=GEN, rule="dream_origin", confidence="random",
                       steps_per_block=steps, layout="full_sequence", eos_fill=False, seed=3)
    banned = list(dream_engine.ids.banned)
    for p in PROMPTS[:2]:
        assert dream_engine.generate([p], cfg)[0].token_ids == dream_origin_generate(
            dream_engine.model, TOK.encode(p), banned, GEN, steps, seed=3)
    other = [dream_origin_generate(dream_engine.model, TOK.encode(p), banned, GEN, steps, seed=4) for p in PROMPTS[:2]]
    assert other != [dream_origin_generate(dream_engine.model, TOK.encode(p), banned, GEN, steps, seed=3)
                     for p in PROMPTS[:2]]  # the uniforms decide: the comparison above can tell
    with pytest.raises(ValueError, match="rule 'dream_origin' needs confidence 'random'"):
        DecodeConfig(rule="dream_origin").validate()


def test_llada_random_remasking():
    model = random_model(5, vocab_size=TOK.vocab_size, eos_bias=-2.0, adapter_dim=0)
    engine = Engine(model, TOK)
    banned = list(engine.ids.banned)
    cfg = DecodeConfig(block_len=4, max_new_tokens=10, rule="topk", confidence="random", steps_per_block=2,
                       layout="full_sequence", eos_fill=False, seed=9)
    want = [llada_random_generate(model, TOK.encode(p), banned, 10, 4, 2, seed=9) for p in PROMPTS[:2]]
    assert [engine.generate([p], cfg)[0].token_ids for p in PROMPTS[:2]] == want
    low = [llada_generate_cfg(model, TOK.encode(p), banned, 10, 4, 2, 0.0) for p in PROMPTS[:2]]
    assert want != low  # the random order decoded differently from low_confidence
