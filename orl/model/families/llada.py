"""LLaDA (`model_type: "llada"`, GSAI-ML/LLaDA-8B-*): an OLMo-style config over a Llama-like body.

Published layout (modeling_llada.py, LLaDALlamaBlock):
  model.transformer.wte                 token embedding ([embedding_size or vocab_size, d_model])
  model.transformer.blocks.N.attn_norm  RMSNorm before attention      -> input_layernorm
    q_proj / k_proj / v_proj            (biases when include_qkv_bias)  -> self_attn.*
    attn_out                            -> self_attn.o_proj
    ff_norm                             RMSNorm before the MLP        -> post_attention_layernorm
    ff_proj, up_proj, ff_out            x = act(ff_proj(x)) * up_proj(x); ff_out(x) -> mlp.gate/up/down_proj
  model.transformer.ln_f                -> model.norm
  model.transformer.ff_out              untied output head -> lm_head (weight_tying: the wte)
No q/k norm, rotate-half RoPE over whole heads (theta 5e5), MHA or GQA (n_kv_heads, or 1 with
multi_query_attention). The mask token is config.mask_token_id (126336, "<|mdm_mask|>"). LLaDA
attends bidirectionally over prompt + the whole answer canvas (full-sequence layout); its reference
generate() commits in semi-autoregressive blocks of 32 (chat.py) and reads logits unshifted.
"""
from __future__ import annotations

import re

from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, decode_defaults, with_published_defaults

MODEL_TYPES = ("llada",)
MASK_TOKEN = "<|mdm_mask|>"
END_OF_TURN = "<|eot_id|>"
SEMI_AR_BLOCK = 32
_BLOCK = re.compile(r"^model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$")
_NAMES = {"attn_norm": "input_layernorm", "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
          "v_proj": "self_attn.v_proj", "attn_out": "self_attn.o_proj", "ff_norm": "post_attention_layernorm",
          "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj"}
_TOP = {"model.transformer.wte.weight": "model.embed_tokens.weight", "model.transformer.ln_f.weight": "model.norm.weight",
        "model.transformer.ff_out.weight": "lm_head.weight"}
# The published ModelConfig's defaults where they differ from LLaDA-8B's values (LLaDAConfig fills every
# field before the model reads it): an absent weight_tying ties the head, the others are refused by name
PUBLISHED_DEFAULTS = {"weight_tying": True, "layer_norm_type": "default", "activation_type": "swiglu",
                      "block_type": "sequential", "rope": False}


def args_from_config(cfg: dict) -> ModelArgs:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not LLaDA")
    p = Problems()
    cfg = with_published_defaults(cfg, PUBLISHED_DEFAULTS, p)
    p.flag(cfg, "block_type", lambda v: v != "llama", "only the llama block")
    p.flag(cfg, "layer_norm_type", lambda v: v != "rms", "only rms")
    p.flag(cfg, "activation_type", lambda v: v != "silu", "only silu (x = silu(ff_proj) * up_proj)")
    for key in ("alibi", "attention_layer_norm", "include_bias", "bias_for_layer_norm", "input_emb_norm",
                "scale_logits", "yarn"):
        p.flag(cfg, key, True)
    p.flag(cfg, "rope", False, "LLaDA without RoPE has learned positions")
    p.flag(cfg, "layer_norm_with_affine", False, "norms without weights")
    p.flag(cfg, "block_group_size", lambda v: v != 1, "grouped blocks")
    p.flag(cfg, "clip_qkv", lambda v: v is not None)
    p.flag(cfg, "rope_scaling", lambda v: bool(v), "only default RoPE")
    d, heads = cfg["d_model"], cfg["n_heads"]
    ffn = cfg.get("mlp_hidden_size") or cfg.get("mlp_ratio", 4) * d
    p.raise_if_any("LLaDA")
    kv = 1 if cfg.get("multi_query_attention") else (cfg.get("n_kv_heads") or heads)
    return ModelArgs(
        vocab_size=cfg.get("embedding_size") or cfg["vocab_size"], dim=d, n_layers=cfg["n_layers"], n_heads=heads,
        n_kv_heads=kv, head_dim=d // heads, ffn_dim=ffn, norm_eps=cfg.get("rms_norm_eps", 1e-5),
        rope_theta=float(cfg.get("rope_theta", 10000.0)), qk_norm=False, qkv_bias=bool(cfg.get("include_qkv_bias")),
        tie_embeddings=bool(cfg.get("weight_tying", False)), max_seq_len=cfg.get("max_sequence_length", 4096))


def manifest_from_config(cfg: dict) -> dict:
    return decode_defaults("full_sequence", SEMI_AR_BLOCK, MASK_TOKEN, cfg, eos_tokens=[END_OF_TURN])


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    """Rename to orl.model's names; names that are not LLaDA's pass through (the loader reports them)."""
    out = {}
    for name, t in tensors.items():
        if m := _BLOCK.match(name):
            i, part, kind = m.groups()
            if part in _NAMES:
                name = f"model.layers.{i}.{_NAMES[part]}.{kind}"
        name = _TOP.get(name, name)
        out[name] = t
    return out
