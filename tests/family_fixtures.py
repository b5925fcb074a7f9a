"""Tiny random checkpoints in each published dLLM family's own layout (issue 18): config.json with the
keys the published config.json uses (scaled down), tensors under the published names, and a byte-level
tokenizer.json whose special tokens are the family's (mask, EOS, end of turn) at small ids.

Qwen-bodied families (Dream / DiffuCoder, Fast-dLLM v2, SDAR / TraDo) are written by transformers'
own save_pretrained of a random Qwen2 / Qwen3 / Qwen3-MoE model (their published tensor names are
those), which is then their reference; LLaDA and LLaDA2-MoE have no transformers class, so their
tensors are written here by name and tests/family_reference.py computes them from the published
equations. Every writer returns (directory, reference): a transformers model or the tensor dict.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCAB = 272  # 256 byte tokens + the family's specials, padded like the published vocabularies
SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=256, vocab_size=VOCAB)
SPECIALS = {  # the published tokens, in the order they get ids 256, 257, ...
    "llada": ["<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"],
    "dream": ["<|endoftext|>", "<|im_end|>", "<|mask|>"],
    "sdar": ["<|endoftext|>", "<|im_end|>", "<|MASK|>"],
    "fast_dllm_v2": ["<|endoftext|>", "<|im_end|>", "|<MASK>|"],
    "llada2_moe": ["<|endoftext|>", "<|role_end|>", "<|mask|>"],
}


def special_id(family: str, token: str) -> int:
    return 256 + SPECIALS[family].index(token)


def write_tokenizer(d: Path, specials: list[str], eos: str, mask_token: str | None = None,
                    chat_template: str | None = None) -> None:
    """Byte-level BPE without merges (one token per byte) plus the special tokens, as tokenizer.json."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tok.save(str(d / "tokenizer.json"))
    cfg = {"eos_token": eos, "pad_token": eos, "add_bos_token": False}
    if mask_token:
        cfg["mask_token"] = mask_token
    if chat_template:
        cfg["chat_template"] = chat_template
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))


def randomize(named: dict[str, torch.Tensor], seed: int = 0) -> None:
    """Unit-ish norms and 0.3-scale matrices (HF's 0.02 init makes logits flat and hides errors)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(named.items()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype)
            if name.endswith("expert_bias"):
                p.copy_(0.2 * noise)
            else:
                p.copy_(1 + 0.2 * noise if p.dim() == 1 and "norm" in name else 0.3 * noise)


def _write_config(d: Path, cfg: dict) -> None:
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


# ---------------------------------------------------------------- Qwen-bodied families (transformers reference)

def _hf_model(cls_name: str, cfg_name: str, cfg: dict, d: Path):
    import transformers

    hf_cfg = getattr(transformers, cfg_name)(**{k: v for k, v in cfg.items() if k not in PUBLISHED_ONLY})
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(hf_cfg).eval()
    randomize(dict(model.named_parameters()))
    model.save_pretrained(d)
    _write_config(d, cfg)  # the published key set, not transformers 5's rewrite of it
    return model


PUBLISHED_ONLY = {"architectures", "auto_map", "model_type", "mask_token_id", "bd_size", "block_size",
                  "torch_dtype", "max_window_layers", "fuse_cross_entropy"}


def write_dream(d: Path, **overrides):
    """Dream-v0 / DiffuCoder: Qwen2 keys, model_type "Dream", mask_token_id in the config."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["DreamModel"], "auto_map": {"AutoModel": "modeling_dream.DreamModel"},
           "model_type": "Dream", **SIZES, "hidden_act": "silu", "rope_theta": 1000000.0, "rope_scaling": None,
           "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
           "max_window_layers": 2, "bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256,
           "mask_token_id": special_id("dream", "<|mask|>"), "torch_dtype": "float32", **overrides}
    ref = _hf_model("Qwen2ForCausalLM", "Qwen2Config", cfg, d)
    write_tokenizer(d, SPECIALS["dream"], "<|endoftext|>", mask_token="<|mask|>")
    return d, ref


def write_fast_dllm_v2(d: Path, **overrides):
    """Fast_dLLM_v2: Qwen2 keys, model_type "Fast_dLLM_Qwen", bd_size; the mask token is found by name."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Fast_dLLM_QwenForCausalLM"], "model_type": "Fast_dLLM_Qwen", **SIZES,
           "hidden_act": "silu", "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": False,
           "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2, "bd_size": 32,
           "bos_token_id": 256, "eos_token_id": 256, "torch_dtype": "float32", **overrides}
    ref = _hf_model("Qwen2ForCausalLM", "Qwen2Config", cfg, d)
    write_tokenizer(d, SPECIALS["fast_dllm_v2"], "<|im_end|>")
    return d, ref


def write_sdar(d: Path, moe: bool = False, mask_token: bool = True, **overrides):
    """SDAR / TraDo: Qwen3 (or Qwen3-MoE) keys, model_type "sdar" / "sdar_moe"; "<|MASK|>" in the vocabulary."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["SDARMoeForCausalLM" if moe else "SDARForCausalLM"], "model_type": "sdar_moe" if moe else "sdar",
           **SIZES, "head_dim": 16, "hidden_act": "silu", "rope_theta": 1000000.0, "rope_scaling": None,
           "attention_bias": False, "tie_word_embeddings": moe, "use_sliding_window": False, "sliding_window": None,
           "max_window_layers": 2, "bos_token_id": 256, "eos_token_id": 256, "fuse_cross_entropy": False,
           "torch_dtype": "float32", **overrides}
    if moe:
        cfg.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True,
                   decoder_sparse_step=1, mlp_only_layers=[])
    name = "Qwen3Moe" if moe else "Qwen3"
    ref = _hf_model(f"{name}ForCausalLM", f"{name}Config", cfg, d)
    specials = SPECIALS["sdar"] if mask_token else SPECIALS["sdar"][:2]
    write_tokenizer(d, specials, "<|im_end|>")
    return d, ref


# ---------------------------------------------------------------- LLaDA and LLaDA2 (tensors by name)

def llada_tensors(cfg: dict) -> dict[str, torch.Tensor]:
    d, heads, kv = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    hd, ffn, V = d // heads, cfg["mlp_hidden_size"], cfg["embedding_size"]
    t = {"model.transformer.wte.weight": (V, d), "model.transformer.ln_f.weight": (d,),
         "model.transformer.ff_out.weight": (V, d)}
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        t |= {p + "attn_norm.weight": (d,), p + "ff_norm.weight": (d,), p + "q_proj.weight": (d, d),
              p + "k_proj.weight": (kv * hd, d), p + "v_proj.weight": (kv * hd, d), p + "attn_out.weight": (d, d),
              p + "ff_proj.weight": (ffn, d), p + "up_proj.weight": (ffn, d), p + "ff_out.weight": (d, ffn)}
        if cfg.get("include_qkv_bias"):
            t |= {p + "q_proj.bias": (d,), p + "k_proj.bias": (kv * hd,), p + "v_proj.bias": (kv * hd,)}
    tensors = {k: torch.empty(s) for k, s in t.items()}
    randomize(tensors, seed=1)
    return tensors


def write_llada(d: Path, **overrides):
    """LLaDA-8B's config keys (OLMo style) and tensor names, scaled down; GQA (n_kv_heads < n_heads)."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu", "alibi": False,
           "alibi_bias_max": 8.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
           "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 32,
           "embedding_size": VOCAB, "vocab_size": 270, "flash_attention": False, "include_bias": False,
           "include_qkv_bias": False, "init_device": "meta", "input_emb_norm": False, "layer_norm_type": "rms",
           "layer_norm_with_affine": True, "mask_token_id": special_id("llada", "<|mdm_mask|>"),
           "max_sequence_length": 256, "mlp_hidden_size": 48, "mlp_ratio": 4, "multi_query_attention": None,
           "n_heads": 4, "n_kv_heads": 2, "n_layers": 2, "rms_norm_eps": 1e-5, "rope": True,
           "rope_full_precision": True, "rope_theta": 500000.0, "scale_logits": False, "weight_tying": False,
           "eos_token_id": 256, "pad_token_id": 256, "torch_dtype": "float32", **overrides}
    tensors = llada_tensors(cfg)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    _write_config(d, cfg)
    write_tokenizer(d, SPECIALS["llada"], "<|endoftext|>")
    return d, (cfg, tensors)


def llada2_tensors(cfg: dict) -> dict[str, torch.Tensor]:
    D, H, KV, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, I, V = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["vocab_size"]
    t = {"model.word_embeddings.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
              p + "attention.query_key_value.weight": ((H + 2 * KV) * hd, D), p + "attention.dense.weight": (D, H * hd),
              p + "attention.query_layernorm.weight": (hd,), p + "attention.key_layernorm.weight": (hd,)}
        if cfg.get("use_qkv_bias"):
            t[p + "attention.query_key_value.bias"] = ((H + 2 * KV) * hd,)
        if i < cfg["first_k_dense_replace"]:
            F = cfg["intermediate_size"]
            t |= {p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D), p + "mlp.down_proj.weight": (D, F)}
            continue
        t |= {p + "mlp.gate.weight": (E, D), p + "mlp.gate.expert_bias": (E,)}
        S = I * cfg["num_shared_experts"]
        t |= {p + "mlp.shared_experts.gate_proj.weight": (S, D), p + "mlp.shared_experts.up_proj.weight": (S, D),
              p + "mlp.shared_experts.down_proj.weight": (D, S)}
        for e in range(E):
            q = f"{p}mlp.experts.{e}."
            t |= {q + "gate_proj.weight": (I, D), q + "up_proj.weight": (I, D), q + "down_proj.weight": (D, I)}
    tensors = {k: torch.empty(s) for k, s in t.items()}
    randomize(tensors, seed=2)
    return tensors


def write_llada2_moe(d: Path, **overrides):
    """LLaDA2.0-mini's config keys and tensor names, scaled down: layer 0 dense, layer 1 MoE with
    8 experts in 4 groups (2 chosen), top-3, a shared expert, partial RoPE 0.5, qk norm."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe", **SIZES, "head_dim": 16,
           "hidden_act": "silu", "rope_theta": 600000, "rope_scaling": None, "partial_rotary_factor": 0.5,
           "rotary_dim": 8, "first_k_dense_replace": 1, "moe_intermediate_size": 16, "num_experts": 8,
           "num_experts_per_tok": 3, "num_shared_experts": 1, "n_group": 4, "topk_group": 2,
           "routed_scaling_factor": 2.5, "moe_router_enable_expert_bias": True, "norm_topk_prob": True,
           "score_function": "sigmoid", "router_dtype": "fp32", "use_qk_norm": True, "use_qkv_bias": False,
           "use_bias": False, "use_rmsnorm": True, "norm_head": False, "norm_softmax": False,
           "tie_word_embeddings": False, "pad_token_id": 256, "eos_token_id": 256, "torch_dtype": "float32",
           **overrides}
    tensors = llada2_tensors(cfg)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    _write_config(d, cfg)
    write_tokenizer(d, SPECIALS["llada2_moe"], "<|endoftext|>")
    return d, (cfg, tensors)


WRITERS = {"llada": write_llada, "dream": write_dream, "sdar": write_sdar,
           "sdar_moe": lambda d, **kw: write_sdar(d, moe=True, **kw), "fast_dllm_v2": write_fast_dllm_v2,
           "llada2_moe": write_llada2_moe}
