"""Gemma 3 (text): config.json reader and writer for transformers' Gemma3ForCausalLM / Gemma3TextConfig.

Tensor names on disk are already ours (orl.model keeps HF's Gemma 3 names: sandwich norms, q/k norms),
so the weight map is the identity. The config keys differ: rope parameters per layer type (5.x
`rope_parameters` or the 4.x `rope_theta` / `rope_local_base_freq` / `rope_scaling`), the layer
pattern (`layer_types` or the older `sliding_window_pattern`), `query_pre_attn_scalar` and the softcaps.
"""
from __future__ import annotations

import torch
from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import UnsupportedConfig, dtype_name, layer_count

MODEL_TYPES = ("gemma3_text",)
ACTS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
END_OF_TURN = "<end_of_turn>"  # Google's generation_config.json stops at it (id 106) besides <eos>
GLOBAL_THETA, LOCAL_THETA = 1_000_000.0, 10_000.0  # transformers' Gemma3TextConfig.default_theta


def family_name(args: ModelArgs) -> str:
    return "gemma3_text"


def _layer_types(cfg: dict) -> list[str]:
    n = layer_count(cfg["num_hidden_layers"])
    if cfg.get("layer_types") is not None:
        return list(cfg["layer_types"])
    pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def _rope(cfg: dict, problems: list[str]) -> tuple[float, float, float]:
    """(global theta, linear scaling factor of global layers, local theta) from either key layout."""
    params = cfg.get("rope_parameters") or {}
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
    if cfg.get("rope_scaling"):  # 4.x: the scaling applies to the global layers only
        full.update(cfg["rope_scaling"])
    factor = 1.0
    for name, p in (("full_attention", full), ("sliding_attention", local)):
        kind = p.get("rope_type", p.get("type", "default"))
        if kind == "linear" and name == "full_attention":
            factor = float(p.get("factor", 1.0))
        elif kind != "default":
            problems.append(f"rope type {kind!r} on {name} layers (supported: default, linear on full_attention)")
    theta = full.get("rope_theta", cfg.get("rope_theta", GLOBAL_THETA))
    local_theta = local.get("rope_theta", cfg.get("rope_local_base_freq", LOCAL_THETA))
    return float(theta), factor, float(local_theta)


def args_from_config(cfg: dict) -> ModelArgs:
    model_type = cfg.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {model_type!r} is not a Gemma 3 text type {MODEL_TYPES} "
                                "(a multimodal 'gemma3' checkpoint needs its text model saved alone)")
    problems = []
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ACTS:
        problems.append(f"hidden_activation {act!r} (supported: {sorted(ACTS)})")
    for key in ("attention_bias", "use_bidirectional_attention", "attn_logit_softcapping"):
        if cfg.get(key):
            problems.append(f"{key}={cfg[key]!r}")
    if cfg.get("tie_word_embeddings") is False:
        problems.append("tie_word_embeddings=false (Gemma 3 ties its head to the embedding)")
    theta, factor, local_theta = _rope(cfg, problems)
    layer_types = _layer_types(cfg)
    if problems:  # every unsupported option at once, so one edit fixes the config
        raise UnsupportedConfig("unsupported Gemma 3 option(s): " + "; ".join(problems))
    n_heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    return ModelArgs(
        vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
        n_heads=n_heads, n_kv_heads=cfg.get("num_key_value_heads", n_heads), head_dim=head_dim,
        ffn_dim=cfg["intermediate_size"], norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=theta,
        qk_norm=True, tie_embeddings=True, max_seq_len=cfg.get("max_position_embeddings", 131072),
        norm_unit_offset=True, sandwich_norm=True, scale_embeddings=True, hidden_act=ACTS[act],
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
        final_logit_softcap=cfg.get("final_logit_softcapping"), rope_scaling_factor=factor,
        layer_types=layer_types, sliding_window=cfg.get("sliding_window") or 0, rope_local_theta=local_theta)


def is_gemma(args: ModelArgs) -> bool:
    return args.sandwich_norm


def config_from_args(args: ModelArgs, dtype: torch.dtype) -> dict:
    """A Gemma3TextConfig that transformers loads as Gemma3ForCausalLM."""
    full = {"rope_type": "default", "rope_theta": args.rope_theta}
    if args.rope_scaling_factor != 1.0:
        full = {"rope_type": "linear", "rope_theta": args.rope_theta, "factor": args.rope_scaling_factor}
    local = {"rope_type": "default", "rope_theta": args.rope_local_theta or args.rope_theta}
    layer_types = args.layer_types or ["full_attention"] * layer_count(args.n_layers, "n_layers")
    cfg = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_activation": "gelu_pytorch_tanh" if args.hidden_act == "gelu_tanh" else args.hidden_act,
        "hidden_size": args.dim, "intermediate_size": args.ffn_dim, "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads, "head_dim": args.head_dim,
        "rms_norm_eps": args.norm_eps, "vocab_size": args.vocab_size, "tie_word_embeddings": args.tie_embeddings,
        "max_position_embeddings": args.max_seq_len, "attention_bias": False,
        "query_pre_attn_scalar": _int_if_whole(args.query_pre_attn_scalar or args.head_dim),
        "final_logit_softcapping": args.final_logit_softcap, "attn_logit_softcapping": None,
        "sliding_window": args.sliding_window or None, "layer_types": layer_types,
        "rope_parameters": {"full_attention": full, "sliding_attention": local},
        "use_bidirectional_attention": False, "dtype": dtype_name(dtype), "torch_dtype": dtype_name(dtype),
    }
    # switches Gemma3TextConfig has no key for: orl.json carries them, transformers would drop them
    plain = dict(norm_unit_offset=True, scale_embeddings=True, qk_norm=True, rotary_fraction=1.0, n_experts=0,
                 learned_pos=False, attn_logn=False, shift_logits=False, adapter_dim=0)
    extras = {k: getattr(args, k) for k, v in plain.items() if getattr(args, k) != v}
    if extras:
        cfg["orl_extensions"] = extras
    return cfg


def _int_if_whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x  # transformers' strict config types it int


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    return tensors
