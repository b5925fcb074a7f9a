"""Dream's diffusion_generate knobs in the full-sequence layout (issue 18): top_p / top_k (Dream's
sample_tokens order: top_p_logits, then top_k_logits, before the draw and the confidence) and alg_temp
(the positions drawn by torch.multinomial from softmax(confidence / alg_temp) instead of topk).

The reference below is written here from Dream's published `_sample` loop on the same model, so the same
logits; its two random calls replay the engine's counter-based draws: Categorical(probs) as the
Gumbel-max of the same uniforms, torch.multinomial(w, n) (without replacement) as the top n of
log w + Gumbel of the same uniforms (the same law: `test_alg_temp_draws_follow_multinomial_law`), and
torch.topk takes the lower position among equal confidences, as the engine (torch leaves it unspecified;
top_p makes exact ties common)."""
import dataclasses

import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.engine.commit import ALG_TEMP_SALT, alg_temp_keys, dream_rule
from orl.engine.full_sequence import propose
from orl.engine.sampling import hash_uniform, top_k_top_p, top_p_then_top_k
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_no_sync import NoHostSync

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()
PROMPTS = ["hi", "hello world", "x = 1"]
GEN = 10
ALGS = {"maskgit_plus": "sampled_prob", "topk_margin": "margin", "entropy": "neg_entropy"}


def logits_at(model, seq: list[int], banned: list[int]) -> torch.Tensor:
    """Logits [T, V] of every position, bidirectional, read shifted (Dream: position i off i - 1)."""
    T = len(seq)
    with torch.no_grad():
        h = model(torch.tensor([seq]), torch.arange(T)[None], torch.ones(1, T, T, dtype=torch.bool),
                  return_hidden=True)
        logits = model.read_out(h, read_from=(torch.arange(T) - 1).clamp(min=0))[0]
    logits[:, banned] = float("-inf")
    return logits


def nucleus(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Dream top_p_logits: sorted descending, drop where the cumulative softmax exceeds p, shifted right
    by one (the first token over p stays), filled with the dtype's lowest value."""
    srt, idx = logits.sort(-1, descending=True)
    remove = torch.softmax(srt, -1).cumsum(-1) > p
    remove = torch.cat([torch.zeros_like(remove[..., :1]), remove[..., :-1]], -1)
    return logits.masked_fill(torch.zeros_like(remove).scatter(-1, idx, remove), torch.finfo(logits.dtype).min)


def keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Dream top_k_logits: drop what is below the k-th largest value."""
    kth = logits.topk(min(k, logits.shape[-1])).values[..., -1:]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def dream_generate(model, prompt, banned, steps, alg, temperature=0.0, seed=0, top_p=None, top_k=None,
                   alg_temp=0.0, eps=1e-3):
    x = torch.tensor(list(prompt) + [TOK.mask_id] * GEN)
    T, P = len(x), len(prompt)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = x == TOK.mask_id
        logits = logits_at(model, x.tolist(), banned)
        # sample_tokens on every position (the masked rows are read below)
        z = logits / temperature if temperature > 0 else logits
        if top_p is not None and top_p < 1:
            z = nucleus(z, top_p)
        if top_k:
            z = keep_top_k(z, top_k)
        probs = torch.softmax(z, -1)
        if temperature > 0:  # Categorical(probs).sample(), replayed: Gumbel-max of the engine's uniforms
            u = hash_uniform(torch.tensor([seed]), torch.tensor([i]), GEN, z.shape[-1])[0]
            drawn = (z[P:] - torch.log(-torch.log(u))).argmax(-1)
        else:
            drawn = probs[P:].argmax(-1)
        x0 = drawn[mask_index[P:]]
        pm = probs[mask_index]
        if alg == "maskgit_plus":
            confidence = pm.gather(-1, x0[:, None]).squeeze(-1)
        elif alg == "topk_margin":
            sp = pm.sort(-1, descending=True).values
            confidence = sp[:, 0] - sp[:, 1]
        else:
            confidence = (pm * torch.log(pm + 1e-10)).sum(-1)
        t, s = timesteps[i], timesteps[i + 1]
        n = int(mask_index.sum() * (1 - s / t)) if i < steps - 1 else int(mask_index.sum())
        full = torch.full((T,), -torch.inf)
        full[mask_index] = confidence
        if n > 0:
            if alg_temp == 0:  # torch.topk; among equal confidences the lower position first (torch.topk's
                # order among ties is unspecified, and a one-token nucleus gives many exact ties: p = 1, margin 1)
                idx = full.sort(descending=True, stable=True).indices[:n]
            else:  # torch.multinomial(softmax(full / alg_temp), n), replayed on the engine's uniforms
                w = torch.softmax(full / alg_temp, -1)
                u = torch.full((T,), 0.5)
                u[P:] = hash_uniform(torch.tensor([seed ^ ALG_TEMP_SALT]), torch.tensor([i]), GEN, 1)[0, :, 0]
                idx = (torch.log(w) - torch.log(-torch.log(u))).topk(n).indices
            x_ = torch.full_like(x, TOK.mask_id)
            x_[mask_index] = x0
            x[idx] = x_[idx]
    answer = x[P:].tolist()
    return answer[: answer.index(TOK.eos_id) + 1] if TOK.eos_id in answer else answer


@pytest.fixture(scope="module")
def engine():
    model = random_model(7, vocab_size=TOK.vocab_size, eos_bias=-2.0, adapter_dim=0, learned_pos=False,
                         shift_logits=True)
    return Engine(model, TOK)


def cfg_of(alg, steps=5, **kw):
    return DecodeConfig(block_len=GEN, max_new_tokens=GEN, rule="dream", confidence=ALGS[alg], steps_per_block=steps,
                        layout="full_sequence", eos_fill=False, **kw)


def run(engine, prompts, cfg):
    return [g.token_ids for g in engine.generate(prompts, cfg)]


CASES = [  # (alg, temperature, top_p, top_k, alg_temp)
    ("maskgit_plus", 0.0, None, None, 0.5), ("topk_margin", 0.0, None, None, 0.05), ("entropy", 0.0, None, None, 2.0),
    ("maskgit_plus", 0.8, None, None, 0.3), ("maskgit_plus", 0.8, 0.9, None, 0.0), ("entropy", 0.7, None, 6, 0.0),
    ("maskgit_plus", 0.9, 0.95, 8, 0.2), ("topk_margin", 0.0, 0.8, None, 0.0), ("maskgit_plus", 1.2, 0.6, 20, 0.0),
    ("maskgit_plus", 1.5, 0.5, 3, 0.0),  # a flat nucleus cut to 3: top_k first would keep fewer (LLaDA2.x order)
]


@pytest.mark.parametrize("alg,temperature,top_p,top_k,alg_temp", CASES)
def test_equals_dream_sample_loop(engine, alg, temperature, top_p, top_k, alg_temp):
    cfg = cfg_of(alg, temperature=temperature, seed=5, top_p=top_p or 1.0, top_k=top_k or 0, alg_temp=alg_temp)
    banned = list(engine.ids.banned)
    want = [dream_generate(engine.model, TOK.encode(p), banned, 5, alg, temperature, 5 + b, top_p, top_k, alg_temp)
            for b, p in enumerate(PROMPTS)]
    assert run(engine, PROMPTS, cfg) == want  # batched, left padded: row b draws with seed 5 + b
    # the knobs change the answer on this model, so the comparison can tell them apart
    off = dataclasses.replace(cfg, top_p=1.0, top_k=0, alg_temp=0.0)
    assert run(engine, PROMPTS, off) != want


def test_alg_temp_seeds_and_steps():
    """Different seeds draw different positions; a very low alg_temp is the plain top-k order."""
    score = torch.tensor([[0.9, 0.5, 0.7, 0.1, 0.3]])
    cand = torch.ones(1, 5, dtype=torch.bool)
    picks = {tuple(dream_rule(alg_temp_keys(score, 0.5, torch.tensor([s]), torch.tensor([0])), cand,
                              torch.tensor([0]), 2)[0].tolist()) for s in range(40)}
    assert len(picks) > 3
    cold = dream_rule(alg_temp_keys(score, 1e-4, torch.tensor([3]), torch.tensor([0])), cand, torch.tensor([0]), 2)
    assert cold.equal(dream_rule(score, cand, torch.tensor([0]), 2))


def test_alg_temp_draws_follow_multinomial_law():
    """Gumbel-top-2 over many seeds: each pair's frequency is the probability that torch.multinomial
    without replacement draws it, p_i p_j / (1 - p_i) + p_j p_i / (1 - p_j) (hand formula)."""
    n = 20000
    score = torch.tensor([0.8, 0.2, -0.3, 0.5])
    w = torch.softmax(score / 0.4, -1)
    keys = alg_temp_keys(score.expand(n, 4), 0.4, torch.arange(n), torch.zeros(n, dtype=torch.long))
    top2 = keys.topk(2, -1).indices.sort(-1).values
    for i in range(4):
        for j in range(i + 1, 4):
            want = w[i] * w[j] / (1 - w[i]) + w[j] * w[i] / (1 - w[j])
            got = ((top2[:, 0] == i) & (top2[:, 1] == j)).float().mean()
            assert abs(got - want) < 0.015, (i, j, got, want)


def test_top_p_then_top_k_by_hand():
    """Dream's order differs from LLaDA2.x / SDAR's (top_k then top_p over what is left)."""
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()[None, None]

    def kept(fn, **kw):
        return torch.isfinite(fn(logits, **kw))[0, 0].tolist()

    assert kept(top_p_then_top_k, temperature=0.0, top_k=2, top_p=0.55) == [True, True, False, False]
    assert kept(top_k_top_p, temperature=0.0, top_k=2, top_p=0.55) == [True, False, False, False]
    assert kept(top_p_then_top_k, temperature=0.0, top_k=0, top_p=0.7) == [True, True, False, False]
    assert kept(top_p_then_top_k, temperature=0.0, top_k=3, top_p=0.7) == [True, True, False, False]  # k past the nucleus
    assert kept(top_p_then_top_k, temperature=1.0, top_k=3, top_p=1.0) == [True, True, True, False]
    assert kept(top_p_then_top_k, temperature=0.0, top_k=0, top_p=1.0) == [True] * 4
    assert kept(top_p_then_top_k, temperature=4.0, top_k=0, top_p=0.5) == [True, True, False, False]  # flatter


def test_step_has_no_host_sync(engine):
    """The step's tensor work with every knob on reads no tensor value back to the host."""
    torch.manual_seed(0)
    logits = torch.randn(2, 6, TOK.vocab_size)
    unresolved = torch.ones(2, 6, dtype=torch.bool)
    z, n_valid, seeds = torch.zeros(2, dtype=torch.long), torch.full((2,), 6), torch.tensor([1, 2])
    for kw in (dict(temperature=0.8, top_p=0.9, top_k=5, alg_temp=0.3), dict(alg_temp=1.0, top_p=0.7)):
        cfg = cfg_of("maskgit_plus", **kw).validate()
        with NoHostSync():
            propose(cfg, logits, unresolved, z, n_valid, seeds, z)


@pytest.mark.parametrize("bad,match", [
    (dict(alg_temp=-1.0), "alg_temp must be >= 0"), (dict(alg_temp=0.5, rule="threshold"), "needs rule 'dream'"),
    (dict(alg_temp=0.5, layout="prompt_block"), "layout 'full_sequence'")])
def test_bad_alg_temp_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(cfg_of("maskgit_plus"), **bad).validate()


@pytest.mark.parametrize("top_p,top_k,changed", [(0.8, 3, ("alg_temp", "top_k")), (0.5, 3, ("alg_temp", "top_p"))])
def test_cli_generate_and_eval_take_the_knobs(tmp_path, capsys, top_p, top_k, changed):
    """orl generate decodes with them (the text equals the engine's with the same settings, and differs
    with each of `changed` off); orl eval parses them into its decode settings."""
    from orl.checkpoint import save_checkpoint
    from orl.cli import build_parser, main

    model = random_model(7, vocab_size=TOK.vocab_size, adapter_dim=0, learned_pos=False, shift_logits=True)
    save_checkpoint(model, TOK, tmp_path / "m", {"block_len": 8, "layout": "full_sequence"})
    flags = ["--rule", "dream", "--confidence", "sampled_prob", "--steps-per-block", "4", "--temperature", "1.5",
             "--seed", "3", "--top-p", str(top_p), "--top-k", str(top_k), "--alg-temp", "0.5"]
    assert main(["generate", "--model", str(tmp_path / "m"), "hello", "--max-new-tokens", "8", *flags]) == 0
    cfg = DecodeConfig(block_len=8, max_new_tokens=8, rule="dream", confidence="sampled_prob", steps_per_block=4,
                       temperature=1.5, seed=3, top_p=top_p, top_k=top_k, alg_temp=0.5, layout="full_sequence")
    engine = Engine.from_checkpoint(tmp_path / "m")
    want = engine.generate(["hello"], cfg)[0].text
    assert capsys.readouterr().out.split("\n")[0] == want
    off = {"alg_temp": 0.0, "top_p": 1.0, "top_k": 0}
    for name in changed:  # the knob changes this answer: the CLI could not have dropped it unseen
        assert engine.generate(["hello"], dataclasses.replace(cfg, **{name: off[name]}))[0].text != want, name
    args = build_parser().parse_args(["eval", "--model", "m", "--out", "o.jsonl", *flags])
    assert (args.top_p, args.top_k, args.alg_temp) == (top_p, top_k, 0.5)
