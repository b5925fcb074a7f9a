"""LLaDA2.0 / 2.1 mini and flash (`model_type: "llada2_moe"`, inclusionAI): a Ling-style MoE body.

Published layout (modeling_llada2_moe.py):
  model.word_embeddings                      -> model.embed_tokens
  model.layers.N.attention.query_key_value   fused [(H + 2 KV) * hd, D]: q heads, then k, then v
  model.layers.N.attention.dense             -> self_attn.o_proj
  model.layers.N.attention.query_layernorm / key_layernorm   per-head RMSNorm -> self_attn.q_norm / k_norm
  model.layers.N.mlp                         dense SwiGLU for N < first_k_dense_replace, else MoE:
    gate.weight, gate.expert_bias            sigmoid router; expert_bias moves the choice, not the weights
    experts.E.{gate,up,down}_proj            routed experts (moe_intermediate_size)
    shared_experts.{gate,up,down}_proj       -> shared_expert (moe_intermediate_size * num_shared_experts)
  model.norm, lm_head
Routing: scores = sigmoid(x W^T) in fp32; the topk_group of n_group groups with the highest sum of
their two best (biased) scores; top-k biased scores inside them; weights = the unbiased scores,
divided by their sum when k > 1 (norm_topk_prob is not read by the published gate), times
routed_scaling_factor. Partial RoPE (partial_rotary_factor 0.5: the first half of each head rotates,
rotate-half). Block diffusion on the absolute grid, blocks of 32, no shift; mask "<|mask|>" (156895).
"""
from __future__ import annotations

import re

import torch
from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import (Problems, UnsupportedConfig, decode_defaults, default_rope,
                                       with_published_defaults)

MODEL_TYPES = ("llada2_moe",)
MASK_TOKEN = "<|mask|>"
BLOCK = 32
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(attention\.\w+|mlp\.shared_experts)\.(.+)$")
# LLaDA2MoeConfig's defaults where orl's would differ: the published code runs on them when a key is absent
PUBLISHED_DEFAULTS = {"rms_norm_eps": 1e-5, "partial_rotary_factor": 0.5, "n_group": 8, "topk_group": 4,
                      "routed_scaling_factor": 2.5, "use_qk_norm": True, "use_bias": True, "use_qkv_bias": False,
                      "max_position_embeddings": 16384}
_ATTN = {"attention.dense": "self_attn.o_proj", "attention.query_layernorm": "self_attn.q_norm",
         "attention.key_layernorm": "self_attn.k_norm", "mlp.shared_experts": "mlp.shared_expert"}


def args_from_config(cfg: dict) -> ModelArgs:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not LLaDA2 MoE")
    p = Problems()
    cfg = with_published_defaults(cfg, PUBLISHED_DEFAULTS, p)
    p.flag(cfg, "hidden_act", lambda v: v != "silu", "only silu")
    p.flag(cfg, "score_function", lambda v: v != "sigmoid", "only the sigmoid router")
    p.flag(cfg, "use_bias", True, "biases on the output / MLP projections")
    p.flag(cfg, "use_rmsnorm", False, "only RMSNorm")
    p.flag(cfg, "norm_head", True, "a normalised output head")
    p.flag(cfg, "norm_softmax", True)
    p.flag(cfg, "router_dtype", lambda v: v not in (None, "fp32", "float32"), "the router runs in fp32")
    p.flag(cfg, "use_sliding_window", True, "full attention only")
    theta, fraction = default_rope(cfg, p)
    n_heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    p.flag(cfg, "rotary_dim", lambda v: v is not None and v != int(head_dim * fraction),
           f"disagrees with head_dim * partial_rotary_factor = {int(head_dim * fraction)}")
    E, moe_ffn = cfg.get("num_experts"), cfg.get("moe_intermediate_size")
    shared = (cfg.get("num_shared_experts") or 0) * (moe_ffn or 0)
    p.flag(cfg, "moe_shared_expert_intermediate_size", lambda v: v is not None and v != shared,
           "the published code sizes the shared expert moe_intermediate_size * num_shared_experts")
    p.raise_if_any("LLaDA2 MoE")
    moe = {}
    if E:
        moe = dict(n_experts=E, n_experts_per_tok=cfg["num_experts_per_tok"], moe_ffn_dim=moe_ffn,
                   shared_expert_ffn_dim=shared, norm_topk_prob=True, router="sigmoid",
                   router_bias=bool(cfg.get("moe_router_enable_expert_bias", True)),
                   n_group=cfg.get("n_group") or 1, topk_group=cfg.get("topk_group") or 1,
                   routed_scaling=float(cfg.get("routed_scaling_factor", 1.0)),
                   first_dense_layers=cfg.get("first_k_dense_replace", 0))
    return ModelArgs(
        vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads, head_dim=head_dim, ffn_dim=cfg["intermediate_size"],
        norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=theta, rotary_fraction=fraction,
        qk_norm=bool(cfg.get("use_qk_norm", False)), qkv_bias=bool(cfg.get("use_qkv_bias", False)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=cfg.get("max_position_embeddings", 32768), **moe)


def manifest_from_config(cfg: dict) -> dict:
    return decode_defaults("absolute_grid", BLOCK, MASK_TOKEN, cfg)


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    """Rename, and split the fused query_key_value into q / k / v (sizes from the tensor and the
    head counts, which need args; without them the fused tensor passes through and the loader names it)."""
    out = {}
    for name, t in tensors.items():
        if name == "model.word_embeddings.weight":
            name = "model.embed_tokens.weight"
        elif m := _LAYER.match(name):
            i, part, rest = m.groups()
            if part == "attention.query_key_value" and args is not None and rest in ("weight", "bias"):
                hd = args.head_dim
                q, k, v = torch.split(t, [args.n_heads * hd, args.n_kv_heads * hd, args.n_kv_heads * hd])
                for proj, piece in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                    out[f"model.layers.{i}.self_attn.{proj}.{rest}"] = piece
                continue
            if part in _ATTN:
                name = f"model.layers.{i}.{_ATTN[part]}.{rest}"
        out[name] = t
    return out
