"""Prompt-lookup speculative decoding (orl.engine.speculative): the same tokens as plain AR decoding on
random and shipped checkpoints (greedy and sampled), drafts and forward counts checked by hand on a
model whose next token is a fixed table of the current one, transformers' prompt-lookup generate
matched token for token and forward for forward, and the option through orl generate / eval / bench."""
import random
from pathlib import Path

import pytest
import torch

import orl.engine.speculative as spec
from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.config import UnsupportedSetting
from orl.eval.peers import hf_generate
from orl.eval.records import config_id, decoder_label
from orl.eval.runner import EvalSpec, decode_dict, run_eval
from orl.eval.tasks import make_samples, task_names
from orl.export import export_hf
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer
from test_ar import PROMPTS, tiny_ar

TOK = CharTokenizer()
SHIPPED_AR = Path(__file__).resolve().parents[1] / "checkpoints" / "orl-tiny-ar"
N = 24
MORE = PROMPTS + ["abababababab", "the cat the cat the", "12+34=12+34=", "aaaa", "xyz", "sort: 3 1 2 sort: 3"]
RANDOM = ["".join(random.Random(i).choices("abcde12+= ", k=random.Random(-i).randint(1, 30))) for i in range(16)]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def steps(monkeypatch):
    """Every verify step as (draft length, accepted draft tokens)."""
    seen, real = [], spec.accepted
    monkeypatch.setattr(spec, "accepted", lambda d, t: seen.append((len(d), real(d, t))) or seen[-1][1])
    return seen


def ids(text: str) -> list[int]:
    return TOK.encode(text)


def tid(text: str) -> list[int]:
    """Token ids of text with '$' for EOS."""
    return [TOK.eos_id if c == "$" else ids(c)[0] for c in text]


def table_model(table: dict[str, str]) -> Transformer:
    """Next token = table[current token] ('$': EOS), whatever came before: attention and MLP write
    nothing (zero output projections), the embedding is one-hot and lm_head maps it to the table's entry."""
    V = TOK.vocab_size
    m = Transformer(ModelArgs(vocab_size=V, dim=128, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=32,
                              max_seq_len=128, tie_embeddings=False))
    with torch.no_grad():
        for p in m.parameters():
            p.zero_() if p.dim() > 1 else p.fill_(1.0)
        m.model.embed_tokens.weight[:, :V] = torch.eye(V)
        for a, b in table.items():
            m.lm_head.weight[tid(b)[0], tid(a)[0]] = 1.0
    return m.eval()


TABLE = {"a": "b", "b": "c", "c": "d", "d": "e", "e": "$", "$": "a", "z": "a"}


def run(dec: ARDecoder, prompt: list[int], **kw):
    return dec.generate_ids([prompt], ARConfig(**kw))[0]


@pytest.mark.parametrize("prompt,k,n,want,forwards", [
    ("abcdza", 4, 32, "bcde$", 2),       # draft bcdz (a's first successor), 3 accepted + e; then no match: $
    ("abcde$za", 8, 32, "bcde$", 1),     # EOS inside the accepted draft bcde$za: the rest is dropped
    ("abcdza", 4, 3, "bcd", 1),          # max_new_tokens 3: the draft is cut to 2 (bc), + d
    ("z", 4, 32, "abcde$", 6),           # nothing earlier ever matches: one token per forward
])
def test_forwards_counted_by_hand(prompt, k, n, want, forwards, steps):
    dec = ARDecoder(table_model(TABLE), TOK)
    p = tid(prompt)
    g = run(dec, p, max_new_tokens=n, spec_tokens=k)
    assert g.token_ids == tid(want)
    assert g.step_forwards == forwards and g.prefill_forwards == int(len(p) > 1) and g.finished == want.endswith("$")
    assert g.tpf == len(want) / forwards
    plain = run(dec, p, max_new_tokens=n)
    assert plain.token_ids == g.token_ids and plain.step_forwards == len(want)
    assert steps[0] == {"abcdza": (min(4, n - 1), min(3, n - 1)), "abcde$za": (7, 5), "z": (0, 0)}[prompt]


def test_drafts_are_transformers_prompt_lookup_candidates():
    cg = pytest.importorskip("transformers.generation.candidate_generator")
    assert spec.PromptLookup([5, 6, 7, 5, 6], 2).draft(2) == [7, 5] and spec.PromptLookup([5, 6, 8], 2).draft(4) == []
    assert spec.PromptLookup([5, 6, 7, 9, 6], 2).draft(4) == [7, 9, 6]  # (9, 6) unseen: the 1-gram 6
    rng = random.Random(0)
    for i in range(300):
        seq, k, n = [rng.randrange(4) for _ in range(rng.randint(1, 25))], rng.randint(1, 6), rng.randint(1, 3)
        hf = cg.PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=n, max_length=10**6)
        want = hf.get_candidates(torch.tensor([seq]))[0][0, len(seq):].tolist()
        grown = spec.PromptLookup(seq[:3], n)
        grown.extend(seq[3:])  # the index built incrementally gives the same drafts
        assert spec.PromptLookup(seq, n).draft(k) == want == grown.draft(k), (seq, k, n)


@pytest.mark.parametrize("tied", [True, False])
def test_equals_plain_greedy_over_many_prompts(tied, steps):
    dec = ARDecoder(tiny_ar(tied), TOK)
    for prompt in MORE + RANDOM:
        plain = run(dec, ids(prompt), max_new_tokens=N)
        for k, n in ((1, 1), (3, 2), (8, 3)):
            g = run(dec, ids(prompt), max_new_tokens=N, spec_tokens=k, spec_ngram=n)
            assert (g.token_ids, g.finished, g.text) == (plain.token_ids, plain.finished, plain.text), (prompt, k, n)
            assert g.step_forwards <= plain.step_forwards and g.total_s >= g.prefill_s > 0
    for m in range(1, 12):  # every budget, also ones reached inside an accepted draft
        assert run(dec, ids("abababababab"), max_new_tokens=m, spec_tokens=8).token_ids == \
            run(dec, ids("abababababab"), max_new_tokens=m).token_ids
    # what was covered: steps without a draft, drafts fully accepted, drafts partly rejected (the cache
    # rolled back, then decoding went on)
    assert any(d == 0 for d, _ in steps) and any(0 < d == a for d, a in steps) and any(a < d for d, a in steps)


def test_sampled_tokens_are_the_plain_samples():
    dec = ARDecoder(tiny_ar(False), TOK)
    for i, prompt in enumerate(MORE):
        plain = dec.generate(prompt, ARConfig(max_new_tokens=N, temperature=0.8), seeds=[i])[0]
        g = dec.generate(prompt, ARConfig(max_new_tokens=N, temperature=0.8, spec_tokens=4), seeds=[i])[0]
        assert g.token_ids == plain.token_ids, prompt


def test_shipped_checkpoint_equals_plain_greedy(steps):
    dec = ARDecoder.from_checkpoint(SHIPPED_AR)
    for s in (s for t in task_names() for s in make_samples(t, "heldout", 3, 0)):
        plain = dec.generate(s.prompt, ARConfig(max_new_tokens=48))[0]
        g = dec.generate(s.prompt, ARConfig(max_new_tokens=48, spec_tokens=10))[0]
        assert g.token_ids == plain.token_ids, s.prompt
    assert any(a > 0 for _, a in steps)


@pytest.mark.parametrize("source", ["random", "shipped", "table"])
def test_matches_transformers_prompt_lookup_generate(source, tmp_path):
    transformers = pytest.importorskip("transformers")
    if source == "shipped":
        dec = ARDecoder.from_checkpoint(SHIPPED_AR)
        prompts = [ids(s.prompt) for t in task_names() for s in make_samples(t, "heldout", 2, 0)]
    else:
        dec = ARDecoder(tiny_ar(False) if source == "random" else table_model(TABLE), TOK)
        prompts = [tid(p) for p in (MORE if source == "random" else ["abcdza", "z", "dcbaabc", "abcde$za"])]
    hf = transformers.AutoModelForCausalLM.from_pretrained(export_hf(dec.model, TOK, tmp_path / "hf")).eval()
    for k, n in ((4, 2), (2, 1)):
        for p in prompts:
            g = run(dec, p, max_new_tokens=N, spec_tokens=k, spec_ngram=n)
            r = hf_generate(hf, p, max_new_tokens=N, eos_id=TOK.eos_id, pad_id=TOK.pad_id, prompt_lookup=(k, n))
            assert r.token_ids == g.token_ids, (source, p)
            # transformers' first call is prefill and first verify at once; orl prefills apart
            assert r.forwards == g.step_forwards, (source, p)
    assert hf_generate(hf, prompts[0], max_new_tokens=N, eos_id=TOK.eos_id, pad_id=TOK.pad_id).tpf == 1.0


def test_refusals_and_config():
    dec = ARDecoder(tiny_ar(False), TOK)
    with pytest.raises(UnsupportedSetting, match="batch 1") as e:
        dec.generate(["ab", "cd"], ARConfig(spec_tokens=2))
    assert e.value.field == "spec_tokens"
    for bad, name in ((dict(spec_tokens=-1), "spec_tokens"), (dict(spec_ngram=0), "spec_ngram"),
                      (dict(spec_tokens=2, compile=True), "compile"), (dict(spec_tokens=2.0), "spec_tokens")):
        with pytest.raises(ValueError, match=name):
            ARConfig(**bad).validate()
    # an AR record's id without the option is the id it had before the option existed
    old = {k: v for k, v in decode_dict(ARConfig()).items() if not k.startswith("spec_")}
    assert config_id(decode_dict(ARConfig()), 1) == config_id(old, 1) != config_id(decode_dict(ARConfig(spec_tokens=4)), 1)


def test_generate_eval_and_bench_take_the_option(tmp_path, capsys):
    ar = save_checkpoint(tiny_ar(False), TOK, tmp_path / "ar", {"objective": "autoregressive"})
    dllm = save_checkpoint(tiny_ar(False, seed=1), TOK, tmp_path / "dllm")
    assert main(["generate", "12+34=12+34=", "--model", str(ar), "--spec-tokens", "4"]) == 0
    assert "prompt-lookup speculative k=4 n=2" in capsys.readouterr().out
    assert main(["generate", "12+", "--model", str(dllm), "--spec-tokens", "4"]) == 2
    assert "--spec-tokens: only for autoregressive checkpoints" in capsys.readouterr().err
    common = dict(model=str(ar), out=str(tmp_path / "r.jsonl"), tasks=["split", "keysort"], limit=3, batch_size=1,
                  decode={"max_new_tokens": 16}, progress=False)
    plain = run_eval(EvalSpec(**common))
    fast = run_eval(EvalSpec(**common, ar={"spec_tokens": 4}))
    assert [r["output_ids"] for r in fast] == [r["output_ids"] for r in plain]
    assert [r["verdict"] for r in fast] == [r["verdict"] for r in plain]
    assert {r["decode"]["spec_tokens"] for r in fast} == {4} and {r["decode"]["spec_tokens"] for r in plain} == {0}
    assert {r["config_id"] for r in fast}.isdisjoint(r["config_id"] for r in plain)
    assert decoder_label(fast[0]["decode"]) == "AR +lookup k4 n2" and decoder_label(plain[0]["decode"]) == "AR"
    with pytest.raises(UnsupportedSetting, match="--batch-size 1"):
        run_eval(EvalSpec(**{**common, "batch_size": 2, "out": str(tmp_path / "b.jsonl")}, ar={"spec_tokens": 4}))
    with pytest.raises(ValueError, match="spec_tokens: only for autoregressive"):
        run_eval(EvalSpec(**{**common, "model": str(dllm)}, ar={"spec_tokens": 4}))


def test_bench_rows(tmp_path):
    from orl.eval.bench import LABELS, BenchSpec, run_bench
    from reference_decoder import random_model

    base = save_checkpoint(random_model(0, vocab_size=TOK.vocab_size, adapter_dim=0), TOK, tmp_path / "base",
                           {"block_len": 8})
    ar = save_checkpoint(tiny_ar(False), TOK, tmp_path / "ar", {"objective": "autoregressive"})
    bench = dict(base=str(base), ar=str(ar), tasks=["split", "keysort"], limit=3, max_new_tokens=24)
    rows, table = run_bench(BenchSpec(**bench, ar_spec_tokens=4))
    assert LABELS["g"] in table and LABELS["h"] in table and "prompt lookup K 4, n-gram 2" in table
    assert rows["e"]["tpf"] == rows["f"]["tpf"] == 1.0 and rows["g"]["tpf"] > 1.0
    assert rows["g"]["tpf"] == rows["h"]["tpf"] and rows["g"]["accuracy"] == rows["e"]["accuracy"]  # same drafts
    rows, table = run_bench(BenchSpec(**bench, ar_spec_tokens=0))
    assert set(rows) == set("acdef") and table.count("n/a: --ar-spec-tokens 0") == 2
    with pytest.raises(ValueError, match="ar_spec_tokens"):
        run_bench(BenchSpec(**bench, ar_spec_tokens=-1))
