"""orl.engine.ar (the AR peer of dlmrt) and orl.export: token for token against transformers'
`generate` on an exported model and against a cache-free greedy loop, batching with left padding,
EOS and max_new_tokens, sampling, no host sync inside the decode step, and what export refuses."""
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import orl.engine.ar as ar
import orl.engine.ar_step as ar_step_module
from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.cli import main
from orl.engine.ar import ARConfig, ARDecoder, ar_step
from orl.engine.request import request_cache_len
from orl.export import ExportError, export_hf
from orl.model import ModelArgs, Transformer, masks
from orl.tokenizer import CharTokenizer

TOK = CharTokenizer()
PROMPTS = ["hello", "12+34=", "sort: 3 1 2", "a", "the quick brown fox"]
N = 24
aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_ar(tied: bool = True, seed: int = 0, **kw) -> Transformer:
    """RoPE-only model with weights scaled so greedy outputs vary (default init copies the last token):
    random norm gains, strong residual branches; with these prompts some answers hit EOS, some not."""
    torch.manual_seed(seed)
    args = dict(vocab_size=TOK.vocab_size, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128,
                max_seq_len=256, tie_embeddings=tied)
    m = Transformer(ModelArgs(**{**args, **kw}))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "embed" in name or "lm_head" in name:
                p.normal_(std=0.5 if tied else 1.0)
            else:
                p.normal_(std=3 * p.shape[1] ** -0.5)
    return m.eval()


@torch.no_grad()
def naive_greedy(model, prompt: list[int], n: int) -> list[int]:
    """No cache: every token recomputes the whole sequence under a causal mask."""
    seq, out = list(prompt), []
    for _ in range(n):
        T = len(seq)
        x = int(model(torch.tensor([seq]), torch.arange(T)[None], masks.causal(T)[None])[0, -1].argmax())
        out.append(x)
        seq.append(x)
        if x == TOK.eos_id:
            break
    return out


@pytest.mark.parametrize("tied", [True, False])
def test_matches_transformers_generate(tmp_path, tied):
    transformers = pytest.importorskip("transformers")
    model = tiny_ar(tied)
    save_checkpoint(model, TOK, tmp_path / "ours")
    assert main(["export", "--model", str(tmp_path / "ours"), "--out", str(tmp_path / "hf")]) == 0
    hf = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert hf.generation_config.eos_token_id == TOK.eos_id and hf.generation_config.pad_token_id == TOK.pad_id
    dec = ARDecoder(model, TOK)
    ours = [dec.generate(p, ARConfig(max_new_tokens=N))[0] for p in PROMPTS]
    with torch.no_grad():
        for p, g in zip(PROMPTS, ours):  # eos / pad from generation_config.json
            ids = torch.tensor([TOK.encode(p)])
            want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, do_sample=False)
            assert g.token_ids == want[0, ids.shape[1]:].tolist(), p
        # one left-padded batch: HF fills finished rows with pad, so cut at the first EOS
        enc = [TOK.encode(p) for p in PROMPTS]
        P = max(map(len, enc))
        ids = torch.tensor([[TOK.pad_id] * (P - len(e)) + e for e in enc])
        attn = torch.tensor([[0] * (P - len(e)) + [1] * len(e) for e in enc])
        want = hf.generate(ids, attention_mask=attn, max_new_tokens=N, do_sample=False)[:, P:].tolist()
    for w, g in zip(want, dec.generate(PROMPTS, ARConfig(max_new_tokens=N))):
        assert g.token_ids == (w[: w.index(TOK.eos_id) + 1] if TOK.eos_id in w else w)
    finished = [g.finished for g in ours]
    assert any(finished) and not all(finished)  # both ways of stopping were compared
    assert len({tuple(g.token_ids) for g in ours}) == len(ours)


@pytest.mark.parametrize("chunk_steps", [1, 3, 8])
def test_cache_matches_full_recompute(chunk_steps):
    model = tiny_ar(False)
    dec = ARDecoder(model, TOK)
    cfg = ARConfig(max_new_tokens=N, chunk_steps=chunk_steps)
    want = [naive_greedy(model, TOK.encode(p), N) for p in PROMPTS]
    single, ran = [], []
    for p in PROMPTS:
        single.append(dec.generate(p, cfg)[0])
        ran.append(int(dec.state(1).step))
    batched = dec.generate(PROMPTS, cfg)  # left padding must not change any row
    for w, s, b, r in zip(want, single, batched, ran):
        assert r == min(N, -(-len(w) // chunk_steps) * chunk_steps)  # stopped at the first check after EOS
        assert s.token_ids == w and b.token_ids == w
        assert s.finished == (w[-1] == TOK.eos_id) and s.n_tokens <= N
        assert s.step_forwards == s.n_tokens and s.commit_forwards == 0 and s.tpf == 1.0
        assert s.text == TOK.decode(w) and s.total_s >= s.prefill_s > 0
    assert dec.generate("a", cfg)[0].prefill_forwards == 0  # a one-token prompt needs no prefill


def test_sampling_is_seeded_batch_independent_and_follows_softmax():
    model = tiny_ar(False)
    dec = ARDecoder(model, TOK)
    cfg = ARConfig(max_new_tokens=12, temperature=1.0)
    a = dec.generate(PROMPTS[:2], cfg, seeds=[5, 6])
    again = [dec.generate(p, cfg, seeds=[s])[0] for p, s in zip(PROMPTS[:2], [5, 6])]
    other = dec.generate(PROMPTS[:2], cfg, seeds=[7, 8])
    assert [g.token_ids for g in a] == [g.token_ids for g in again]
    assert [g.token_ids for g in a] != [g.token_ids for g in other]
    # first token over many seeds vs softmax of the model's next-token logits
    n, prompt = 4000, TOK.encode("hi")
    small = ARDecoder(model, TOK, max_len=8)
    firsts = [g.token_ids[0] for g in small.generate_ids([prompt] * n, ARConfig(max_new_tokens=1, temperature=1.0),
                                                         seeds=list(range(n)))]
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([prompt]), torch.arange(2)[None], masks.causal(2)[None])[0, -1], -1)
    freq = torch.bincount(torch.tensor(firsts), minlength=p.numel()).float() / n
    assert p.max() < 0.9 and (freq - p).abs().sum() / 2 < 0.035  # 0.014 here; T off by 25% gives 0.06


def test_max_new_tokens_and_context_are_respected():
    dec = ARDecoder(tiny_ar(False), TOK, max_len=16)
    for n in (1, 5, 9):
        g = dec.generate("12+34=", ARConfig(max_new_tokens=n, chunk_steps=4))[0]
        assert g.n_tokens <= n and (g.finished or g.n_tokens == n)
    with pytest.raises(ValueError, match="exceeds the context"):
        dec.generate("12+34=", ARConfig(max_new_tokens=11))
    with pytest.raises(ValueError, match="chunk_steps"):
        dec.generate("a", ARConfig(chunk_steps=0))


def test_cache_is_sized_to_the_request_not_the_context():
    """With a 32k context (Gemma 3's), a short request gets a cache of its own length rounded up to
    a power of two (at least 64), not 32k slots; a longer one regrows it; tokens equal the uncached
    recompute either way."""
    model = tiny_ar(False, max_seq_len=32768)
    dec = ARDecoder(model, TOK)
    gens = dec.generate(PROMPTS[:2], ARConfig(max_new_tokens=N))
    assert dec._states[2, False].cache.max_len == 64 and dec._states[2, False].out.shape == (2, 64)
    assert [g.token_ids for g in gens] == [naive_greedy(model, TOK.encode(p), N) for p in PROMPTS[:2]]
    long = "the quick brown fox jumps over the lazy dog " * 2  # 88 + 24 tokens -> 128 slots
    g = dec.generate(long, ARConfig(max_new_tokens=N))[0]
    assert dec._states[1, False].cache.max_len == 128 and g.token_ids == naive_greedy(model, TOK.encode(long), N)
    dec.generate("a", ARConfig(max_new_tokens=4))
    assert dec._states[1, False].cache.max_len == 128  # a shorter request reuses the buffers (no new shape)
    assert [request_cache_len(n, 100) for n in (1, 64, 65, 100)] == [64, 64, 100, 100]  # never past max_len


def test_eval_and_bench_size_the_ar_cache_to_the_request(tmp_path, monkeypatch):
    """orl eval (run_eval) and orl bench --ar (ARDecoder.from_checkpoint) on an AR checkpoint with a
    32k context allocate request-sized caches only."""
    from orl.eval.runner import EvalSpec, run_eval

    save_checkpoint(tiny_ar(False, max_seq_len=32768), TOK, tmp_path / "ar", {"objective": "autoregressive"})
    sizes = []
    new_cache = Transformer.new_cache
    monkeypatch.setattr(Transformer, "new_cache",
                        lambda self, b, n, *a, **k: sizes.append(n) or new_cache(self, b, n, *a, **k))
    run_eval(EvalSpec(model=str(tmp_path / "ar"), out=str(tmp_path / "r.jsonl"), tasks=["add"], limit=2,
                      batch_size=2, decode={"max_new_tokens": 16}, progress=False))
    ARDecoder.from_checkpoint(tmp_path / "ar").generate("12+34=", ARConfig(max_new_tokens=16))
    assert sizes and max(sizes) <= 128, sizes


# ---------------------------------------------------------------- no host sync in the step

class HostSync(RuntimeError):
    pass


class NoHostSync(TorchDispatchMode):
    """Rejects ops that read a tensor value back to the host (as in test_no_sync.py)."""

    BANNED = {aten._local_scalar_dense, aten.item, aten.nonzero, aten.is_nonzero, aten.equal, aten.lift_fresh}

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.overloadpacket)
        if func.overloadpacket in self.BANNED:
            raise HostSync(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_decode_step_has_no_host_sync(temperature):
    dec = ARDecoder(tiny_ar(False), TOK)
    st = dec.setup([TOK.encode(p) for p in PROMPTS[:2]], ARConfig())
    mode = NoHostSync()
    with torch.no_grad(), mode:
        for _ in range(4):
            ar_step(dec.model, st, temperature, TOK.eos_id)
    assert int(st.step) == 4 and any("attention" in str(op) for op in mode.ops)


def test_no_sync_checks_can_fail(monkeypatch):
    dec = ARDecoder(tiny_ar(False), TOK)
    st = dec.setup([TOK.encode("hello")], ARConfig())
    real = ar_step_module.hash_uniform  # ar_step reads it from its own module
    monkeypatch.setattr(ar_step_module, "hash_uniform", lambda seed, step, *a: real(seed, step * int(step.sum().item() >= 0), *a))
    with pytest.raises(HostSync), torch.no_grad(), NoHostSync():
        ar_step(dec.model, st, 0.8, TOK.eos_id)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="(?i)data.dependent|graph.break|item"), torch.no_grad():
        torch.compile(ar_step, fullgraph=True, backend="eager")(dec.model, st, 0.8, TOK.eos_id)
    torch._dynamo.reset()


def test_step_compiles_fullgraph_and_matches_eager():
    torch._dynamo.reset()
    dec = ARDecoder(tiny_ar(False, n_layers=1), TOK, max_len=64)
    cfg = ARConfig(max_new_tokens=N, temperature=0.8)
    eager = dec.generate(PROMPTS[:2], cfg)
    # aot_eager: dynamo (a sync is a graph break, an error under fullgraph) without inductor's cold compile
    dec._compiled = torch.compile(ar_step, fullgraph=True, dynamic=False, backend="aot_eager")
    compiled = dec.generate(PROMPTS[:2], ARConfig(**{**cfg.to_dict(), "compile": True}))
    with torch.compiler.set_stance("fail_on_recompile"):  # a new request reuses the graph
        again = dec.generate(PROMPTS[2:4], ARConfig(**{**cfg.to_dict(), "compile": True}))
    assert [g.token_ids for g in compiled] == [g.token_ids for g in eager]
    assert [g.token_ids for g in again] == [g.token_ids for g in dec.generate(PROMPTS[2:4], cfg)]
    torch._dynamo.reset()


# ---------------------------------------------------------------- export

def test_scalable_softmax_cache_matches_full_recompute():
    # attn_logn counts the keys each query's mask admits: the static cache's empty and padded slots must not count
    model = tiny_ar(False, attn_logn=True)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.logn_scale.uniform_(0.2, 1.5)
    dec, cfg = ARDecoder(model, TOK), ARConfig(max_new_tokens=N, chunk_steps=3)
    want = [naive_greedy(model, TOK.encode(p), N) for p in PROMPTS]
    assert [g.token_ids for g in dec.generate(PROMPTS, cfg)] == want
    plain = tiny_ar(False)  # the same weights without the scale (tiny_ar redraws parameters in order: copy them)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.endswith("logn_scale")})
    assert [naive_greedy(plain, TOK.encode(p), N) for p in PROMPTS] != want  # the scale changes what they say


def test_plain_export_refuses_what_qwen3_cannot_express(tmp_path):
    for kw, name in ((dict(learned_pos=True), "learned_pos"), (dict(adapter_dim=8), "adapter_dim"),
                     (dict(attn_logn=True), "attn_logn")):
        with pytest.raises(ExportError, match=name):
            export_hf(tiny_ar(False, **kw), TOK, tmp_path / name, remote_code=False)
        assert not (tmp_path / name).exists()
    out = export_hf(tiny_ar(False), TOK, tmp_path / "ok")
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == TOK.eos_id
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    model, _, _ = load_checkpoint(out)  # still an orl checkpoint too
    assert not model.args.learned_pos
