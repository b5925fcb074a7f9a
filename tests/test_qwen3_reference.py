"""orl.model against transformers' Qwen3 / Qwen3-MoE: a directory written by save_pretrained loads
through orl.checkpoint and, under a causal mask, gives the same logits (DESIGN sections 2, 7)."""
import json

import pytest
import torch
from safetensors.torch import save_file

from orl.checkpoint import CheckpointError, load_checkpoint
from orl.model import masks
from orl.model.families.qwen3 import args_from_config
from orl.tokenizer import CharTokenizer

transformers = pytest.importorskip("transformers")

V, B, T = 120, 2, 12
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, rms_norm_eps=1e-6, rope_theta=500.0, max_position_embeddings=64)


def randomize(model) -> None:
    """HF's init (std 0.02, unit norms) makes logits nearly flat, which would hide small errors."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.3 * noise if p.dim() == 1 else 0.3 * noise)


def reference(cls, cfg_cls, **kw):
    torch.manual_seed(0)
    cfg = cfg_cls(**COMMON, **kw)
    cfg._attn_implementation = "eager"
    model = cls(cfg).eval()
    randomize(model)
    return model


def assert_logits_match(hf, ours, offset: int = 0) -> None:
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    pos = (torch.arange(T) + offset).expand(B, T)
    with torch.no_grad():
        want = hf(input_ids=tokens, position_ids=pos).logits.float()
        got = ours(tokens, pos, masks.causal(T).expand(B, T, T))
    assert want.abs().max() > 1.0  # logits carry signal, so a wrong weight cannot pass unnoticed
    assert (got - want).abs().max().item() <= 1e-4


def save_hf(model, d) -> None:
    model.save_pretrained(d)
    CharTokenizer().save(d)  # load_checkpoint insists on a tokenizer; a char one fits in V


@pytest.mark.parametrize("tied", [False, True])
def test_dense_qwen3_matches_transformers(tmp_path, tied):
    hf = reference(transformers.Qwen3ForCausalLM, transformers.Qwen3Config, num_hidden_layers=2,
                   tie_word_embeddings=tied)
    save_hf(hf, tmp_path)
    ours, tok, manifest = load_checkpoint(tmp_path)
    a = ours.args
    assert (a.qk_norm, a.tie_embeddings, a.head_dim, a.rope_theta, a.n_experts) == (True, tied, 16, 500.0, 0)
    assert manifest["source"] == "config.json" and manifest["family"] == "qwen3"
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) == tied
    assert ours.num_params() == hf.num_parameters()
    assert_logits_match(hf, ours)
    assert_logits_match(hf, ours, offset=7)


@pytest.mark.parametrize("norm_topk", [False, True])
def test_moe_qwen3_matches_transformers(tmp_path, norm_topk):
    # decoder_sparse_step=2: layers 0 and 2 dense, layer 1 and 3 MoE
    hf = reference(transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig, num_hidden_layers=4,
                   num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=2,
                   norm_topk_prob=norm_topk)
    save_hf(hf, tmp_path)
    ours, _, manifest = load_checkpoint(tmp_path)
    a = ours.args
    assert (a.n_experts, a.n_experts_per_tok, a.moe_ffn_dim, a.moe_every, a.norm_topk_prob) == (4, 2, 16, 2, norm_topk)
    assert a.shared_expert_ffn_dim == 0 and manifest["family"] == "qwen3_moe"
    assert [a.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert_logits_match(hf, ours)


def test_fused_expert_layout_loads(tmp_path):
    """transformers 5 keeps experts fused in memory; a state dict saved as is must load too."""
    hf = reference(transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig, num_hidden_layers=2,
                   num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    state = hf.state_dict()
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    hf.config.save_pretrained(tmp_path)
    CharTokenizer().save(tmp_path)
    ours, _, _ = load_checkpoint(tmp_path)
    assert_logits_match(hf, ours)


# ---------------------------------------------------------------- config reading

REAL_MOE = {  # the shape of Qwen3-30B-A3B's config.json (transformers 4.x keys), scaled down
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "vocab_size": 200,
    "tie_word_embeddings": False, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24, "norm_topk_prob": True,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False, "sliding_window": 4096,
    "attention_bias": False, "hidden_act": "silu",
}


def test_legacy_config_keys():
    a = args_from_config(REAL_MOE)
    assert (a.rope_theta, a.n_experts, a.moe_ffn_dim, a.norm_topk_prob, a.ffn_dim) == (1e6, 8, 24, True, 96)
    # transformers' Qwen3 rotates whole heads whatever partial_rotary_factor says: refused (test_family_qwen3_rotary.py)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        args_from_config({**REAL_MOE, "partial_rotary_factor": 0.5})


@pytest.mark.parametrize("change,needle", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn'"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}}, "'linear'"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_only_layers": [0]}, "mlp_only_layers=[0]"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"hidden_act": "gelu"}, "'gelu'"),
    ({"model_type": "llama"}, "'llama'"),
])
def test_unsupported_config_is_named(tmp_path, change, needle):
    (tmp_path / "config.json").write_text(json.dumps({**REAL_MOE, **change}))
    with pytest.raises(CheckpointError, match="config.json") as e:
        load_checkpoint(tmp_path)
    assert needle in str(e.value)


def test_sliding_window_size_is_ignored_when_disabled():
    assert args_from_config({**REAL_MOE, "use_sliding_window": False, "sliding_window": 8}).n_layers == 2
