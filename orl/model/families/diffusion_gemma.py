"""DiffusionGemma (transformers' `diffusion_gemma`, a Gemma 4 derivative): config reader and weight map.

The published model is two networks that share every weight they have in common: a causal encoder
that writes the KV cache over the prompt and each finished canvas, and a bidirectional decoder that
reads it while it denoises a canvas of `canvas_length` tokens. orl builds one Transformer with the
decoder's weights and runs it in two modes (Transformer.forward(decoder=...)); the decoder's extra
part, self-conditioning, is a module of its own. What the body needs, as ModelArgs switches:
plain RMSNorm with the product in fp32 (norm_scale_fp32), sandwich norms, qk-norm and a scale-free
v_norm, attention scale 1 (query_pre_attn_scalar 1), embeddings times sqrt(d), a layer_scalar per
layer, global (full-attention) layers with their own head_dim / KV heads, no v_proj (k_eq_v) and
proportional RoPE, local layers with default RoPE, a dense GELU MLP beside a routed MoE in every
layer (parallel_moe, the "gemma4" router), a final logit softcap (30 unless the config says).

Layout on disk (save_pretrained of DiffusionGemmaForBlockDiffusion; ties stored once, on the decoder):
  model.decoder.{embed_tokens, norm, self_conditioning.*}   -> model.{...}
  model.decoder.layers.N.*                                  -> model.layers.N.*, except
    router.proj.weight / router.scale / router.per_expert_scale -> moe.gate.weight / .scale / .per_expert_scale
    experts.gate_up_proj [E, 2I, D] (gate rows first), experts.down_proj [E, D, I] -> moe.experts.e.*
  model.encoder.language_model.layers.N.layer_scalar         a buffer (never tied): must equal the decoder's
  model.encoder.vision_tower.*, model.encoder.embed_vision.* dropped: orl decodes text only
"""
from __future__ import annotations

import re

import torch
from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, layer_count, token_ids

MODEL_TYPES = ("diffusion_gemma",)
ACTS = ("gelu_pytorch_tanh", "gelu_tanh")
SOFTCAP = 30.0          # DiffusionGemmaTextConfig.final_logit_softcapping: a class attribute, not saved
GLOBAL_HEAD_DIM = 512   # transformers' default when a config has no per_layer_config
OBJECTIVE = "diffusion_gemma"
_DEC = re.compile(r"^model\.decoder\.layers\.(\d+)\.(.+)$")
_ENC = re.compile(r"^model\.encoder\.language_model\.(.+)$")
_ROUTER = {"router.proj.weight": "moe.gate.weight", "router.scale": "moe.gate.scale",
           "router.per_expert_scale": "moe.gate.per_expert_scale"}


def family_name(args: ModelArgs) -> str:
    return "diffusion_gemma"


def is_diffusion_gemma(args: ModelArgs) -> bool:
    return args.self_conditioning


def _text(cfg: dict) -> dict:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not DiffusionGemma {MODEL_TYPES}")
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise UnsupportedConfig("a diffusion_gemma config.json needs a text_config object")
    return text


def _layer_types(t: dict) -> list[str]:
    types = t.get("layer_types")
    if types is None:  # transformers' default: 5 local to 1 global
        n = layer_count(t["num_hidden_layers"])
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    types = list(types)
    if types:
        types[-1] = "full_attention"  # transformers forces the last layer global (with a warning)
    return types


def _global_shape(t: dict, types: list[str], p: Problems) -> tuple[int, int]:
    """(head_dim, KV heads) of the full-attention layers from per_layer_config; one shape for all."""
    per_layer = t.get("per_layer_config")
    if per_layer is None:
        hd = t.get("global_head_dim", GLOBAL_HEAD_DIM)
        return hd, t.get("num_global_key_value_heads") or t.get("num_key_value_heads", t["num_attention_heads"])
    default = (t.get("head_dim", 256), t.get("num_key_value_heads", t["num_attention_heads"]))
    try:  # transformers writes the layer keys zero-padded ("05") once there are 10 layers or more
        per_layer = {int(k): v for k, v in per_layer.items()}
    except (TypeError, ValueError, AttributeError):
        p.append(f"per_layer_config {per_layer!r} (expected an object keyed by layer index)")
        per_layer = {}
    shapes = set()
    for i, kind in enumerate(types):
        o = per_layer.get(i) or {}
        if extra := sorted(set(o) - {"head_dim", "num_key_value_heads"}):
            p.append(f"per_layer_config[{i}] sets {extra} (only head_dim and num_key_value_heads)")
        shape = (o.get("head_dim", default[0]), o.get("num_key_value_heads", default[1]))
        if kind == "sliding_attention" and shape != default:
            p.append(f"per_layer_config[{i}] changes a sliding layer's shape")
        if kind == "full_attention":
            shapes.add(shape)
    if len(shapes) > 1:
        p.append(f"full-attention layers of different shapes {sorted(shapes)}")
    return next(iter(shapes), default)


def _rope(t: dict, p: Problems) -> tuple[float, float, float, float]:
    """(global theta, global proportion, global factor, local theta)."""
    params = t.get("rope_parameters") or {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}
    full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    kind = full.get("rope_type", "default")
    if kind not in ("proportional", "default"):
        p.append(f"rope type {kind!r} on full_attention layers (supported: proportional, default)")
    proportion = float(full.get("partial_rotary_factor", 1.0)) if kind == "proportional" else 1.0
    if kind == "default" and full.get("partial_rotary_factor", 1.0) != 1.0:
        p.append("default RoPE with partial_rotary_factor on full_attention layers")
    if local.get("rope_type", "default") != "default" or local.get("partial_rotary_factor", 1.0) != 1.0:
        p.append(f"sliding_attention RoPE {local} (supported: default, whole head)")
    if local.get("factor", 1.0) != 1.0:
        p.append("a RoPE factor on sliding_attention layers")
    return (float(full.get("rope_theta", 1_000_000.0)), proportion, float(full.get("factor", 1.0)),
            float(local.get("rope_theta", 10_000.0)))


def args_from_config(cfg: dict) -> ModelArgs:
    t = _text(cfg)
    p = Problems()
    p.flag(t, "hidden_activation", lambda v: v not in ACTS, f"supported: {ACTS}")
    p.flag(t, "attention_bias", True)
    p.flag(t, "use_bidirectional_attention", "all", "a bidirectional encoder; orl's encoder pass is causal")
    p.flag(t, "num_experts", lambda v: not v, "DiffusionGemma layers always run the MoE")
    for c in (cfg, t):
        p.flag(c, "tie_word_embeddings", False, "the head is the embedding")
    p.flag(t, "final_logit_softcapping", lambda v: v is None, "transformers' forward divides by it")
    types = _layer_types(t)
    g_hd, g_kv = _global_shape(t, types, p)
    theta, proportion, factor, local_theta = _rope(t, p)
    p.raise_if_any("DiffusionGemma")
    n_heads = t["num_attention_heads"]
    return ModelArgs(
        vocab_size=t["vocab_size"], dim=t["hidden_size"], n_layers=t["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=t.get("num_key_value_heads", n_heads), head_dim=t.get("head_dim", 256),
        ffn_dim=t["intermediate_size"], norm_eps=t.get("rms_norm_eps", 1e-6), rope_theta=theta,
        qk_norm=True, tie_embeddings=True, max_seq_len=t.get("max_position_embeddings", 131072),
        sandwich_norm=True, scale_embeddings=True, hidden_act="gelu_tanh", query_pre_attn_scalar=1.0,
        final_logit_softcap=float(t.get("final_logit_softcapping", SOFTCAP)), rope_scaling_factor=factor,
        layer_types=types, sliding_window=t.get("sliding_window", 512), rope_local_theta=local_theta,
        n_experts=t["num_experts"], n_experts_per_tok=t["top_k_experts"], moe_ffn_dim=t["moe_intermediate_size"],
        norm_topk_prob=True, router="gemma4",
        global_head_dim=g_hd, global_n_kv_heads=g_kv, global_k_eq_v=True,
        global_rope_proportion=proportion if proportion != 1.0 else 0.0,
        v_norm=True, norm_scale_fp32=True, layer_scalar=True, parallel_moe=True, self_conditioning=True)


def manifest_from_config(cfg: dict) -> dict:
    """No mask token (the canvas starts as uniform random tokens); the block is the canvas."""
    t = _text(cfg)
    return {"objective": OBJECTIVE, "layout": "prompt_block", "block_len": cfg.get("canvas_length", 256),
            "mask_id": None, "eos_ids": token_ids(t.get("eos_token_id", cfg.get("eos_token_id")))}


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    """Published names -> orl's (names already orl's pass through). The encoder's own copies (its
    layer_scalar buffers, or weights a checkpoint stored untied) must equal the decoder's: orl runs both
    passes on one set of weights."""
    out, encoder = {}, {}
    for name, t in tensors.items():
        if name.startswith(("model.encoder.vision_tower.", "model.encoder.embed_vision.")):
            continue
        if m := _ENC.match(name):
            encoder[m.group(1)] = t
            continue
        if m := _DEC.match(name):
            i, rest = m.groups()
            if rest == "experts.gate_up_proj":
                half = t.shape[1] // 2
                for e in range(t.shape[0]):
                    out[f"model.layers.{i}.moe.experts.{e}.gate_proj.weight"] = t[e, :half]
                    out[f"model.layers.{i}.moe.experts.{e}.up_proj.weight"] = t[e, half:]
                continue
            if rest == "experts.down_proj":
                for e in range(t.shape[0]):
                    out[f"model.layers.{i}.moe.experts.{e}.down_proj.weight"] = t[e]
                continue
            name = f"model.layers.{i}.{_ROUTER.get(rest, rest)}"
        elif name.startswith("model.decoder."):
            name = "model." + name[len("model.decoder."):]
        out[name] = t
    for rest, t in sorted(encoder.items()):
        mine = tensors.get("model.decoder." + rest)
        if mine is None and rest.startswith("embed_tokens"):
            mine = tensors.get("model.decoder.embed_tokens.weight")
        if mine is None or mine.shape != t.shape or not torch.equal(mine, t):
            raise UnsupportedConfig(f"encoder tensor model.encoder.language_model.{rest} differs from the decoder's "
                                    "(or the decoder has none): orl runs the encoder and decoder passes on one set "
                                    "of weights")
    return out


def config_from_args(args: ModelArgs, dtype: torch.dtype) -> dict:
    raise UnsupportedConfig("orl does not write DiffusionGemma checkpoints (quantize / export / train them): "
                            "it reads transformers' save_pretrained layout only")
