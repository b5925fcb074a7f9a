"""orl.model's Gemma 3 switches against transformers' Gemma3ForCausalLM: a save_pretrained directory
loads through orl.checkpoint, gives the same logits on sequences longer than the sliding window,
and our AR decoder generates what transformers' generate does (DESIGN sections 2, 8)."""
import json

import pytest
import torch

from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.model import ModelArgs, Transformer, masks
from orl.model.families.gemma3 import args_from_config
from orl.tokenizer import CharTokenizer

transformers = pytest.importorskip("transformers")

V = CharTokenizer().vocab_size  # the AR decoder bans ids past the tokenizer, so the vocabularies agree
B, T, W = 2, 14, 4              # T > W: the local layers must cut keys off
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, num_hidden_layers=6, sliding_window=W, query_pre_attn_scalar=24, rms_norm_eps=1e-6,
              max_position_embeddings=128, eos_token_id=1, pad_token_id=0, bos_token_id=2,
              layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 500.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}})


def randomize(model) -> None:
    """HF's init (zero-centred norms, std 0.02) makes logits nearly flat, which would hide small errors."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def reference(**kw):
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(**{**COMMON, **kw})
    cfg._attn_implementation = "eager"
    model = transformers.Gemma3ForCausalLM(cfg).eval()
    randomize(model)
    return model


def saved(hf, d):
    hf.save_pretrained(d)
    CharTokenizer().save(d)
    return load_checkpoint(d)


def assert_logits_match(hf, ours, offset: int = 0) -> None:
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    pos = (torch.arange(T) + offset).expand(B, T)
    with torch.no_grad():
        want = hf(input_ids=tokens, position_ids=pos).logits.float()
        got = ours(tokens, pos, masks.causal(T).expand(B, T, T))
    assert want.abs().max() > 1.0  # logits carry signal, so a wrong weight cannot pass unnoticed
    assert (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("kw", [{}, {"final_logit_softcapping": 3.0},
                                {"rope_parameters": {"full_attention": {"rope_type": "linear", "rope_theta": 500.0,
                                                                        "factor": 2.0},
                                                     "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}}}],
                         ids=["plain", "softcap", "linear-rope"])
def test_gemma3_matches_transformers(tmp_path, kw):
    hf = reference(**kw)
    ours, _, manifest = saved(hf, tmp_path)
    a = ours.args
    assert manifest["family"] == "gemma3_text" and a.sandwich_norm and a.norm_unit_offset and a.scale_embeddings
    assert (a.sliding_window, a.rope_theta, a.rope_local_theta, a.query_pre_attn_scalar) == (W, 500.0, 20.0, 24.0)
    assert [a.is_sliding(i) for i in range(6)] == [True, True, False] * 2
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    assert ours.num_params() == hf.num_parameters()
    assert_logits_match(hf, ours)
    assert_logits_match(hf, ours, offset=9)


def test_window_matters():
    """The same weights with a window wider than the input give other logits: the window is applied."""
    hf = reference()
    args = args_from_config(hf.config.to_dict())
    full = Transformer(ModelArgs.from_dict({**args.to_dict(), "sliding_window": 1000})).eval()
    full.load_state_dict(hf.state_dict(), strict=False)
    tokens = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(input_ids=tokens).logits
        got = full(tokens, torch.arange(T)[None], masks.causal(T)[None])
    assert (got[:, :W] - want[:, :W]).abs().max() <= 1e-4  # inside the window nothing differs
    assert (got[:, W:] - want[:, W:]).abs().max() > 1e-2


def test_greedy_generation_matches_transformers(tmp_path):
    """Left-padded batch, prompt + answer well past the window, sliding layers served from the cache."""
    hf = reference()
    ours, tok, _ = saved(hf, tmp_path)
    prompts = [[2, 40, 41, 42, 43, 44, 45], [2, 50, 51, 52]]
    new = 20
    gens = ARDecoder(ours, tok, max_len=64).generate_ids(prompts, ARConfig(max_new_tokens=new, chunk_steps=4))
    P = max(map(len, prompts))
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts])
    attn = (torch.arange(P)[None] >= torch.tensor([P - len(p) for p in prompts])[:, None]).long()
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=attn, max_new_tokens=new, do_sample=False,
                          eos_token_id=1, pad_token_id=0)[:, P:].tolist()
    for g, want in zip(gens, out):
        if 1 in want:
            want = want[: want.index(1) + 1]
        assert g.token_ids == want
    assert max(len(g.token_ids) for g in gens) > W


def test_save_load_roundtrip_writes_gemma_config(tmp_path):
    hf = reference(final_logit_softcapping=3.0)
    ours, tok, _ = saved(hf, tmp_path / "hf")
    save_checkpoint(ours, tok, tmp_path / "orl")
    cfg = json.loads((tmp_path / "orl" / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text" and cfg["architectures"] == ["Gemma3ForCausalLM"]
    assert "orl_extensions" not in cfg
    again, _, manifest = load_checkpoint(tmp_path / "orl")
    assert manifest["family"] == "gemma3_text" and again.args == ours.args
    back = transformers.Gemma3ForCausalLM.from_pretrained(tmp_path / "orl").eval()  # transformers reads ours too
    back.config._attn_implementation = "eager"
    assert_logits_match(back, again)


# ---------------------------------------------------------------- config reading

GEMMA_270M = {  # google/gemma-3-270m's config.json (transformers 4.x keys), with a small vocabulary
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640, "intermediate_size": 2048,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 18,
    "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
    "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512, "torch_dtype": "bfloat16",
    "use_bidirectional_attention": False, "vocab_size": 1000, "_sliding_window_pattern": 6,
}


def test_legacy_config_keys():
    a = args_from_config(GEMMA_270M)
    assert (a.rope_theta, a.rope_local_theta, a.sliding_window, a.n_kv_heads, a.hidden_act) == \
        (1e6, 1e4, 512, 1, "gelu_tanh")
    assert [i for i in range(18) if not a.is_sliding(i)] == [5, 11, 17]
    scaled = args_from_config({**GEMMA_270M, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    assert scaled.rope_scaling_factor == 8.0


def test_unsupported_options_are_named_together(tmp_path):
    bad = {**GEMMA_270M, "attn_logit_softcapping": 50.0, "hidden_activation": "relu",
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "use_bidirectional_attention": True}
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(CheckpointError, match="config.json") as e:
        load_checkpoint(tmp_path)
    for needle in ("attn_logit_softcapping=50.0", "'relu'", "'yarn'", "use_bidirectional_attention"):
        assert needle in str(e.value)
