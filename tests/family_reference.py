"""Independent references for the families transformers has no class for, written from the published
modeling code's equations (modeling_llada.py's LLaDALlamaBlock, modeling_llada2_moe.py) and reading
the published tensor names directly: no orl code. Plain loops where the published code loops (the
MoE gate, token by token), a boolean attention mask [T, T] so any layout can be checked."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate(x, pos, theta, rot_dim):
    """Rotate-half RoPE on the first rot_dim dims of every head; x [H, T, hd], pos [T]."""
    inv = 1.0 / (theta ** (torch.arange(0, rot_dim, 2).float() / rot_dim))
    freqs = pos.float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos(), emb.sin()
    xr, xp = x[..., :rot_dim], x[..., rot_dim:]
    half = rot_dim // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    return torch.cat([xr * cos + rotated * sin, xp], -1)


def attend(q, k, v, mask):
    """q [H, T, hd], k / v [KV, T, hd] (each kv head serves H / KV consecutive q heads), mask [T, T]."""
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def swiglu(x, gate, up, down):
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def llada_forward(cfg, W, tokens, mask):
    """LLaDAModelLM logits [T, V] for tokens [T] under mask [T, T]."""
    d, H, KV, eps = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["rms_norm_eps"]
    hd, T = d // H, len(tokens)
    pos = torch.arange(T)
    x = W["model.transformer.wte.weight"][tokens]
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        h = rms_norm(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
        k = (h @ W[p + "k_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        v = (h @ W[p + "v_proj.weight"].T).view(T, KV, hd).transpose(0, 1)
        q, k = rotate(q, pos, cfg["rope_theta"], hd), rotate(k, pos, cfg["rope_theta"], hd)
        x = x + attend(q, k, v, mask).transpose(0, 1).reshape(T, d) @ W[p + "attn_out.weight"].T
        h = rms_norm(x, W[p + "ff_norm.weight"], eps)
        x = x + swiglu(h, W[p + "ff_proj.weight"], W[p + "up_proj.weight"], W[p + "ff_out.weight"])
    x = rms_norm(x, W["model.transformer.ln_f.weight"], eps)
    return x @ W["model.transformer.ff_out.weight"].T


def llada2_gate(cfg, W, p, row):
    """LLaDA2MoeGate for one token: (expert ids, weights)."""
    scores = torch.sigmoid(W[p + "gate.weight"].float() @ row.float())
    biased = scores + W[p + "gate.expert_bias"]
    E, G = len(scores), cfg["n_group"]
    size = E // G
    group_score = [biased[g * size:(g + 1) * size].topk(2).values.sum().item() for g in range(G)]
    best = sorted(range(G), key=lambda g: -group_score[g])[:cfg["topk_group"]]
    allowed = torch.full((E,), float("-inf"))
    for g in best:
        allowed[g * size:(g + 1) * size] = 0
    chosen = (biased + allowed).topk(cfg["num_experts_per_tok"]).indices
    w = scores[chosen]
    if cfg["num_experts_per_tok"] > 1:
        w = w / (w.sum() + 1e-20)
    return chosen, w * cfg["routed_scaling_factor"]


def llada2_forward(cfg, W, tokens, mask):
    """LLaDA2MoeModelLM logits [T, V] for tokens [T] under mask [T, T]."""
    D, H, KV, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, T = cfg["rms_norm_eps"], len(tokens)
    rot = int(hd * cfg["partial_rotary_factor"])
    pos = torch.arange(T)
    x = W["model.word_embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        qkv = (h @ W[p + "attention.query_key_value.weight"].T).view(T, H + 2 * KV, hd)
        q, k, v = (t.transpose(0, 1) for t in qkv.split([H, KV, KV], dim=1))
        q = rms_norm(q, W[p + "attention.query_layernorm.weight"], eps)
        k = rms_norm(k, W[p + "attention.key_layernorm.weight"], eps)
        q, k = rotate(q, pos, cfg["rope_theta"], rot), rotate(k, pos, cfg["rope_theta"], rot)
        x = x + attend(q, k, v, mask).transpose(0, 1).reshape(T, H * hd) @ W[p + "attention.dense.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        m = p + "mlp."
        if i < cfg["first_k_dense_replace"]:
            x = x + swiglu(h, W[m + "gate_proj.weight"], W[m + "up_proj.weight"], W[m + "down_proj.weight"])
            continue
        out = swiglu(h, W[m + "shared_experts.gate_proj.weight"], W[m + "shared_experts.up_proj.weight"],
                     W[m + "shared_experts.down_proj.weight"])
        for t in range(T):
            chosen, w = llada2_gate(cfg, W, m, h[t])
            for e, we in zip(chosen.tolist(), w):
                q_ = f"{m}experts.{e}."
                out[t] += we * swiglu(h[t], W[q_ + "gate_proj.weight"], W[q_ + "up_proj.weight"],
                                      W[q_ + "down_proj.weight"])
        x = x + out
    x = rms_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T
