"""Qwen3 / Qwen3-MoE: config.json reader and writer, and the weight-name map onto orl.model.

Parameter names of orl.model already equal Hugging Face's Qwen3 names, so the only weight mapping is
for MoE experts. Checkpoints on disk (including those written by transformers 5.x save_pretrained)
hold one tensor per expert, `mlp.experts.{e}.{gate,up,down}_proj.weight`, which is our layout.
transformers 5.x fuses them in memory (and some tools save that state dict as is):
  mlp.experts.gate_up_proj  [E, 2 * I, D]   rows [:I] are gate_proj, rows [I:] are up_proj
  mlp.experts.down_proj     [E, D, I]
`to_native` splits those back into per-expert tensors.
"""
from __future__ import annotations

import re

import torch
from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, default_rope, dtype_name

MODEL_TYPES = ("qwen3", "qwen3_moe")
_FUSED = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$")


def family_name(args: ModelArgs) -> str:
    return "qwen3_moe" if args.n_experts else "qwen3"


def body_args(cfg: dict, problems: Problems, moe: bool) -> dict:
    """ModelArgs fields of a Qwen3 / Qwen3-MoE body (SDAR and TraDo use the same keys); unsupported
    options go to `problems`."""
    problems.flag(cfg, "attention_bias", True, "no projection biases in a Qwen3 body")
    problems.flag(cfg, "hidden_act", lambda v: v != "silu", "only silu")
    problems.flag(cfg, "use_sliding_window", True, "full attention only")
    problems.flag(cfg, "mlp_only_layers", lambda v: bool(v))
    theta, fraction = default_rope(cfg, problems)
    if fraction != 1.0:  # transformers' Qwen3 accepts the key and rotates whole heads all the same
        problems.append(f"partial_rotary_factor={fraction} (a Qwen3 body rotates whole heads)")
    n_heads = cfg["num_attention_heads"]
    kw = {}
    if moe:
        kw = dict(n_experts=cfg.get("num_experts", cfg.get("num_local_experts")),
                  n_experts_per_tok=cfg["num_experts_per_tok"], moe_ffn_dim=cfg["moe_intermediate_size"],
                  norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
                  moe_every=cfg.get("decoder_sparse_step", 1))
    return dict(
        vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
        n_heads=n_heads, n_kv_heads=cfg.get("num_key_value_heads", n_heads),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads, ffn_dim=cfg["intermediate_size"],
        norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=theta, qk_norm=True,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_seq_len=cfg.get("max_position_embeddings", 32768), **kw)


def args_from_config(cfg: dict) -> ModelArgs:
    model_type = cfg.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {model_type!r} is not a Qwen3 family type {MODEL_TYPES}")
    problems = Problems()
    kw = body_args(cfg, problems, moe=model_type == "qwen3_moe")
    problems.raise_if_any("Qwen3")
    return ModelArgs(**kw)


def config_from_args(args: ModelArgs, dtype: torch.dtype) -> dict:
    moe = bool(args.n_experts)
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": family_name(args), "hidden_act": "silu", "attention_bias": False,
        "hidden_size": args.dim, "intermediate_size": args.ffn_dim, "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads, "head_dim": args.head_dim,
        "rms_norm_eps": args.norm_eps, "rope_theta": args.rope_theta, "vocab_size": args.vocab_size,
        "tie_word_embeddings": args.tie_embeddings, "max_position_embeddings": args.max_seq_len,
        "use_sliding_window": False, "dtype": dtype_name(dtype), "torch_dtype": dtype_name(dtype),
    }
    if args.rotary_fraction != 1.0:  # for people; transformers ignores it (orl_extensions says so)
        cfg["partial_rotary_factor"] = args.rotary_fraction
    if moe:
        cfg.update(num_experts=args.n_experts, num_experts_per_tok=args.n_experts_per_tok,
                   moe_intermediate_size=args.moe_ffn_dim, norm_topk_prob=args.norm_topk_prob,
                   decoder_sparse_step=args.moe_every, mlp_only_layers=[])
    # features Qwen3 cannot express: transformers would load such a directory as a different model,
    # so say so where a person reads it; orl.json is what orl loads them from
    plain = ModelArgs()
    extras = {k: getattr(args, k) for k in ("learned_pos", "attn_logn", "shift_logits", "adapter_dim", "shared_expert_ffn_dim",
                                            "qkv_bias", "first_dense_layers", "router", "router_bias", "n_group",
                                            "topk_group", "routed_scaling", "rotary_fraction")
              if getattr(args, k) != getattr(plain, k)}
    if not args.qk_norm:
        extras["qk_norm"] = False
    if extras:
        cfg["orl_extensions"] = extras
    return cfg


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    """Split transformers' fused expert tensors into orl's (and the on-disk) per-expert names."""
    out = {}
    for name, t in tensors.items():
        m = _FUSED.match(name)
        if m is None or t.dim() != 3:
            out[name] = t
            continue
        prefix, kind = m.groups()
        for e in range(t.shape[0]):
            if kind == "down_proj":
                out[f"{prefix}.{e}.down_proj.weight"] = t[e]
            else:
                gate, up = t[e].chunk(2, dim=0)
                out[f"{prefix}.{e}.gate_proj.weight"] = gate
                out[f"{prefix}.{e}.up_proj.weight"] = up
    return out
