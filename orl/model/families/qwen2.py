"""Qwen2 / Qwen2.5 bodies: the config reader Dream, DiffuCoder and Fast-dLLM v2 share, and plain
`qwen2` checkpoints (an autoregressive base, imported like Qwen3).

A Qwen2 body is Qwen3 without the q/k RMSNorm and with biases on the q, k and v projections (not on
o_proj). Tensor names are transformers' Qwen2 names, which are orl.model's, so the weight map is the
identity.
"""
from __future__ import annotations

from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, default_rope

MODEL_TYPES = ("qwen2",)


def body_args(cfg: dict, problems: Problems, head_dim: int | None = None) -> dict:
    """ModelArgs fields of a Qwen2 body; unsupported options go to `problems`. head_dim: what the
    family's attention uses (Dream ignores the key and takes hidden_size // heads)."""
    problems.flag(cfg, "hidden_act", lambda v: v != "silu", "only silu")
    problems.flag(cfg, "use_sliding_window", True, "full attention only")
    problems.flag(cfg, "layer_types", lambda v: v and "sliding_attention" in v, "full attention only")
    theta, fraction = default_rope(cfg, problems)
    if fraction != 1.0:
        problems.append(f"partial_rotary_factor={fraction} (a Qwen2 body rotates whole heads)")
    n_heads = cfg["num_attention_heads"]
    return dict(vocab_size=cfg["vocab_size"], dim=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
                n_heads=n_heads, n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
                head_dim=head_dim or cfg.get("head_dim") or cfg["hidden_size"] // n_heads,
                ffn_dim=cfg["intermediate_size"], norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=theta,
                qk_norm=False, qkv_bias=True, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                max_seq_len=cfg.get("max_position_embeddings", 32768))


def args_from_config(cfg: dict) -> ModelArgs:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not a Qwen2 type {MODEL_TYPES}")
    problems = Problems()
    kw = body_args(cfg, problems)
    problems.raise_if_any("Qwen2")
    return ModelArgs(**kw)


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    return tensors
