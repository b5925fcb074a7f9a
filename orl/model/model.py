"""The native block-diffusion transformer (Qwen3-style), whole, in one file.

Parameter names follow Hugging Face's Qwen3 / Qwen3-MoE / Gemma 3 layouts, so a transformers
checkpoint maps onto this module without renaming. Gemma 3 is a set of switches in ModelArgs
(unit-offset norms, sandwich norms, scaled embeddings, GELU-tanh, query_pre_attn_scalar, sliding-window
local layers with their own RoPE theta, logit softcap), not a separate class; so are Gemma 4 /
DiffusionGemma (per-layer head_dim and KV heads, keys as values, v_norm, proportional RoPE,
layer_scalar, a MoE beside the dense MLP, a self-conditioned decoder pass:
orl.model.families.diffusion_gemma). The model knows nothing about engines or training: visibility
comes in as a boolean mask (orl.model.masks), residual context as (z, a, unresolved); local layers
narrow that mask by RoPE position distance themselves.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from orl.model.args import ModelArgs
from orl.model.head import VocabHead
from orl.model.kv_cache import KVCache
from orl.model.masks import sliding_window
from orl.model.mlp import ACTIVATIONS, MLP, gelu_tanh  # noqa: F401 (importers of orl.model.model)
from orl.model.moe import MoE
from orl.model.residual import RMSNorm, ResidualAdapter, residual_inputs


def rope_cos_sin(pos: Tensor, rotary_dim: int, theta: float, dtype: torch.dtype,
                 scaling: float = 1.0, proportion: float = 0.0) -> tuple[Tensor, Tensor]:
    """pos [B, T] -> cos, sin [B, 1, T, rotary_dim] (the rotate-half convention of HF Llama/Qwen);
    scaling > 1 is linear RoPE scaling (inv_freq / factor, as transformers computes it).
    proportion > 0 is "proportional" RoPE over a whole head of rotary_dim: only the first
    int(proportion * rotary_dim / 2) frequency pairs turn, with exponents over rotary_dim; the others
    get frequency 0 (cos 1, sin 0), so they pass through unrotated."""
    if proportion:
        turning = int(proportion * rotary_dim // 2)
        exps = torch.arange(0, 2 * turning, 2, dtype=torch.int64, device=pos.device).float() / rotary_dim
        inv_freq = torch.cat([1.0 / theta ** exps, exps.new_zeros(rotary_dim // 2 - turning)])
    else:
        exps = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device=pos.device).float() / rotary_dim
        inv_freq = 1.0 / (theta ** exps)
    if scaling != 1.0:
        inv_freq = inv_freq / scaling
    freqs = pos[..., None].float() * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, H, T, Dh]; rotates the first cos.shape[-1] dims (partial rotary leaves the rest)."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
    xr = xr * cos + torch.cat([-x2, x1], dim=-1) * sin
    return torch.cat([xr, xp], dim=-1) if xp.shape[-1] else xr


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.layer, self.args = layer, args
        self.sliding = args.is_sliding(layer)
        self.scale = args.query_pre_attn_scalar ** -0.5 if args.query_pre_attn_scalar else None
        self.head_dim, self.n_kv_heads = hd, kv = args.layer_head_dim(layer), args.layer_kv_heads(layer)
        self.q_proj = nn.Linear(args.dim, args.n_heads * hd, bias=args.qkv_bias)
        self.k_proj = nn.Linear(args.dim, kv * hd, bias=args.qkv_bias)
        # k_eq_v (Gemma 4 global layers): no v_proj, the values are the raw (un-normed, unrotated) keys
        self.v_proj = None if args.k_eq_v(layer) else nn.Linear(args.dim, kv * hd, bias=args.qkv_bias)
        self.o_proj = nn.Linear(args.n_heads * hd, args.dim, bias=False)

        def norm(**kw):
            return RMSNorm(hd, args.norm_eps, args.norm_unit_offset, fp32_scale=args.norm_scale_fp32, **kw)

        self.q_norm = norm() if args.qk_norm else nn.Identity()
        self.k_norm = norm() if args.qk_norm else nn.Identity()
        self.v_norm = norm(with_scale=False) if args.v_norm else nn.Identity()
        # SSMax's s_h [H], 1 / ln 64 at init: a query that sees 64 keys starts with the plain logits
        self.logn_scale = nn.Parameter(torch.full((args.n_heads,), 1 / math.log(64))) if args.attn_logn else None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor,
                cache: KVCache | None, slots: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        hd, kv = self.head_dim, self.n_kv_heads
        q = self.q_norm(self.q_proj(x).view(B, T, self.args.n_heads, hd)).transpose(1, 2)
        k_raw = self.k_proj(x).view(B, T, kv, hd)
        k = self.k_norm(k_raw).transpose(1, 2)
        v = k_raw if self.v_proj is None else self.v_proj(x).view(B, T, kv, hd)
        v = self.v_norm(v).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.logn_scale is not None:  # scaling q scales the logits; n from the mask, so padding never counts
            if mask.dtype != torch.bool:  # an additive float mask would sum to -inf: n must count visible keys
                raise TypeError(f"attn_logn needs a boolean attention mask, got {mask.dtype}")
            log_n = mask.sum(-1, keepdim=True).clamp(min=1).float().log()[:, None]  # [B, 1, T, 1]
            q = q * (self.logn_scale.float()[:, None, None] * log_n).to(q.dtype)  # the factor in fp32, as in bf16 runs
        if cache is not None:
            k, v = cache.update(self.layer, slots, k, v)
            k, v = k.to(q.dtype), v.to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], scale=self.scale,
                                           enable_gqa=self.args.n_heads != kv)  # [B, H, T, Dh]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class Block(nn.Module):
    """Pre-norm block. sandwich_norm (Gemma) adds a norm on each branch's output; the names are HF's:
    there post_attention_layernorm normalises the attention output and pre_feedforward_layernorm
    the MLP input, while without the sandwich (Qwen3) post_attention_layernorm is the MLP's pre-norm.
    parallel_moe (Gemma 4): the dense MLP (post-norm _1) and the MoE (pre-norm _2, routed on the
    un-normed stream, post-norm _2) are summed, then post_feedforward_layernorm; layer_scalar scales
    the layer's output."""

    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.sandwich, self.sliding = args.sandwich_norm, args.is_sliding(layer)
        self.self_attn = Attention(args, layer)
        parallel = args.parallel_moe
        if args.is_moe_layer(layer) and not parallel:
            self.mlp = MoE(args)
        else:
            self.mlp = MLP(args.dim, args.ffn_dim, args.hidden_act)

        def norm():
            return RMSNorm(args.dim, args.norm_eps, args.norm_unit_offset, fp32_scale=args.norm_scale_fp32)

        self.input_layernorm = norm()
        self.post_attention_layernorm = norm()
        if self.sandwich:
            self.pre_feedforward_layernorm = norm()
            self.post_feedforward_layernorm = norm()
        self.moe = MoE(args) if parallel else None
        if parallel:
            self.post_feedforward_layernorm_1 = norm()
            self.pre_feedforward_layernorm_2 = norm()
            self.post_feedforward_layernorm_2 = norm()
        if args.layer_scalar:
            self.register_buffer("layer_scalar", torch.ones(1))
        else:
            self.layer_scalar = None

    def forward(self, x, cos, sin, mask, cache, slots):
        if not self.sandwich:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, slots)
            return x + self.mlp(self.post_attention_layernorm(x))
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, slots))
        y = self.mlp(self.pre_feedforward_layernorm(x))
        if self.moe is not None:
            y = self.post_feedforward_layernorm_1(y) + self.post_feedforward_layernorm_2(
                self.moe(self.pre_feedforward_layernorm_2(x), route_from=x))
        x = x + self.post_feedforward_layernorm(y)
        return x if self.layer_scalar is None else x * self.layer_scalar


class SelfConditioning(nn.Module):
    """DiffusionGemma's decoder input: normed(embedding + gated MLP of the normed soft embedding of the
    previous step's prediction); the first step's soft embedding is zero, so only the outer norm acts."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.pre_norm = RMSNorm(args.dim, args.norm_eps, fp32_scale=args.norm_scale_fp32)
        self.post_norm = RMSNorm(args.dim, args.norm_eps, with_scale=False)
        self.gate_proj = nn.Linear(args.dim, args.ffn_dim, bias=False)
        self.up_proj = nn.Linear(args.dim, args.ffn_dim, bias=False)
        self.down_proj = nn.Linear(args.ffn_dim, args.dim, bias=False)
        self.act = ACTIVATIONS[args.hidden_act]

    def forward(self, h: Tensor, soft: Tensor) -> Tensor:
        s = self.pre_norm(soft)
        return self.post_norm(h + self.down_proj(self.act(self.gate_proj(s)) * self.up_proj(s)))


class Backbone(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.dim)
        self.embed_positions = nn.Embedding(args.max_seq_len, args.dim) if args.learned_pos else None
        self.residual_adapter = ResidualAdapter(args.dim, args.adapter_dim, args.norm_eps) if args.adapter_dim else None
        self.layers = nn.ModuleList(Block(args, i) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps, args.norm_unit_offset, fp32_scale=args.norm_scale_fp32)
        self.self_conditioning = SelfConditioning(args) if args.self_conditioning else None


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model = Backbone(args)
        self.lm_head = VocabHead(args.dim, args.vocab_size)
        if args.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """GPT-2 style init (small normal, residual-branch outputs scaled by depth); a no-op on the
        meta device, where checkpoints are loaded. The adapter's down projection stays zero."""
        if self.lm_head.weight.is_meta:  # normal_ on meta tensors still costs seconds for a 262k vocabulary
            return
        out_std = std / (2 * self.args.n_layers) ** 0.5
        for name, mod in self.named_modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)) and "residual_adapter.down_proj" not in name:
                last = name.endswith("o_proj") or name.endswith("down_proj")
                nn.init.normal_(mod.weight, std=out_std if last else std)

    def embed(self, tokens: Tensor, pos: Tensor, *, mask_id: int | None = None, z: Tensor | None = None,
              a: Tensor | None = None, unresolved: Tensor | None = None, residual: str = "off") -> Tensor:
        """tokens, pos [B, T] -> input embeddings [B, T, D], residual context at unresolved positions."""
        m = self.model
        h = m.embed_tokens(tokens)
        if residual != "off":
            mask_emb = m.embed_tokens.weight[mask_id] if mask_id is not None else None
            h = residual_inputs(h, mask_emb, z, a, unresolved, residual, m.residual_adapter, self.args.adapter_alpha)
        if self.args.scale_embeddings:  # Gemma: sqrt(dim) rounded to the embedding dtype first, as in HF
            h = h * torch.tensor(self.args.dim ** 0.5, device=h.device).to(m.embed_tokens.weight.dtype)
        if m.embed_positions is not None:
            h = h + m.embed_positions(pos.clamp(0, self.args.max_seq_len - 1))
        return h

    def forward(self, tokens: Tensor, pos: Tensor, mask: Tensor, *, cache: KVCache | None = None,
                slots: Tensor | None = None, return_hidden: bool = False, read_from: Tensor | None = None,
                before: Tensor | None = None, decoder: bool = False, self_cond: Tensor | None = None,
                **residual) -> Tensor:
        """tokens, pos [B, T]; mask [B, T, K] bool (K = T, or the cache length with a cache);
        slots [T] cache slots the new K/V go to. Returns logits [B, T, V] (fp32), or the final hidden
        states [B, T, D]; read_from / before: see `read_out`.
        decoder (DiffusionGemma's denoising pass over a canvas): the input goes through the
        self-conditioning block with self_cond [B, T, V] (the previous step's logits; None on the first
        step), and local layers measure their window from the canvas start, pos[:, 0], for every canvas
        query (transformers' decoder reads the encoder's sliding cache, the last window - 1 keys, whole)."""
        a = self.args
        h = self.embed(tokens, pos, **residual)
        if decoder and self.model.self_conditioning is not None:
            h = self.model.self_conditioning(h, self.soft_embedding(self_cond, h))
        g_dim = a.global_head_dim or a.head_dim
        if a.global_rope_proportion:
            rope = rope_cos_sin(pos, g_dim, a.rope_theta, h.dtype, a.rope_scaling_factor, a.global_rope_proportion)
        else:
            rope = rope_cos_sin(pos, int(g_dim * a.rotary_fraction), a.rope_theta, h.dtype, a.rope_scaling_factor)
        local_rope, local_mask = rope, mask
        if a.layer_types is not None and "sliding_attention" in a.layer_types:
            if a.rope_local_theta is not None or g_dim != a.head_dim or a.global_rope_proportion:
                theta = a.rope_theta if a.rope_local_theta is None else a.rope_local_theta
                local_rope = rope_cos_sin(pos, a.rotary_dim, theta, h.dtype)
            k_pos = pos if cache is None else cache.write_pos(slots, pos)
            q_pos = pos[:, :1].expand_as(pos) if decoder else pos
            local_mask = sliding_window(mask, q_pos, k_pos, a.sliding_window)
        for layer in self.model.layers:
            cos, sin = local_rope if layer.sliding else rope
            h = layer(h, cos, sin, local_mask if layer.sliding else mask, cache, slots)
        h = self.model.norm(h)
        if return_hidden:
            return h
        return self.read_out(h, read_from, before)

    def soft_embedding(self, logits: Tensor | None, h: Tensor) -> Tensor:
        """logits [B, T, V] (or None: zeros) -> the expected scaled input embedding [B, T, D]."""
        if logits is None:
            return torch.zeros_like(h)
        w = self.model.embed_tokens.weight
        soft = logits.softmax(-1, dtype=torch.float32).to(w.dtype) @ w
        if self.args.scale_embeddings:
            soft = soft * torch.tensor(self.args.dim ** 0.5, device=h.device).to(h.dtype)
        return soft

    def read_out(self, h: Tensor, read_from: Tensor | None = None, before: Tensor | None = None) -> Tensor:
        """Final hidden states [B, T, D] -> logits [B, T, V] (fp32).

        Without read_from / before (autoregressive use) position t's logits come from its own state:
        the next-token prediction. Diffusion code asks for the token AT each position and says where
        the position before it is; a model with args.shift_logits then reads that position's state
        (models without the shift ignore both):
          read_from [T] or [B, T]: index in h of the position before each one (packed training rows,
                                   where a noisy block's first token follows the clean copy);
          before [B, D]:           the state of the position just before h[:, 0] (engine blocks,
                                   whose predecessor is the last committed position, in the cache).
        """
        if self.args.shift_logits and before is not None:
            h = torch.cat([before[:, None].to(h.dtype), h[:, :-1]], 1)
        elif self.args.shift_logits and read_from is not None:
            idx = read_from.expand(h.shape[:2]) if read_from.dim() == 1 else read_from
            h = h.gather(1, idx[..., None].expand(h.shape))
        return self.softcap(self.lm_head(h).float())

    def softcap(self, logits: Tensor) -> Tensor:
        """The final logit soft-capping of the family (Gemma 2's cap * tanh(logits / cap)), if any: shared
        by read_out and training code that applies the head weight itself (orl.train.chunked_head)."""
        if self.args.final_logit_softcap:
            cap = self.args.final_logit_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, batch: int, max_len: int, dtype=None, device=None) -> KVCache:
        a = self.args
        w = self.lm_head.weight
        shapes = [(a.layer_kv_heads(i), a.layer_head_dim(i)) for i in range(a.n_layers)]
        return KVCache(a.n_layers, batch, a.n_kv_heads, max_len, a.head_dim,
                       dtype or w.dtype, device or w.device, layer_shapes=shapes)
