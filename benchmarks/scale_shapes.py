"""The model shapes of benchmarks/scale.py (published configs, and their --tiny stand-ins), the
random-weight models built at them, and the bytes one forward of such a model must read (the
numerator of the roofline)."""
from __future__ import annotations

import torch

from orl.model import ModelArgs, Transformer

QWEN3 = dict(n_heads=16, n_kv_heads=8, head_dim=128, vocab_size=151936, tie_embeddings=True, rope_theta=1e6,
             qk_norm=True, norm_eps=1e-6)
SHAPES = {  # published config.json values
    "qwen3-0.6b": dict(QWEN3, dim=1024, n_layers=28, ffn_dim=3072),
    "qwen3-1.7b": dict(QWEN3, dim=2048, n_layers=28, ffn_dim=6144),
    "qwen3-4b": dict(QWEN3, dim=2560, n_layers=36, n_heads=32, ffn_dim=9728),
    # LLaDA2.0-mini: 16B total, 1.4B active; its first layer is a dense SwiGLU of ffn_dim
    # (first_k_dense_replace 1), the other 19 are MoE
    "llada2-mini": dict(dim=2048, n_layers=20, n_heads=16, n_kv_heads=4, head_dim=128, ffn_dim=5120,
                        vocab_size=157184, tie_embeddings=False, rope_theta=6e5, rotary_fraction=0.5, qk_norm=True,
                        n_experts=256, n_experts_per_tok=8, moe_ffn_dim=512, shared_expert_ffn_dim=512,
                        first_dense_layers=1),
}
TINY = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128, vocab_size=512)
TINY_MOE = dict(n_experts=8, n_experts_per_tok=2, moe_ffn_dim=32, shared_expert_ffn_dim=32)


class IdsOnly:
    """A tokenizer of ids alone: the mask, EOS and pad ids are the top three of the vocabulary and
    lie beyond vocab_size, so the engine bans all three (no EOS: answers run their full length)."""

    def __init__(self, vocab: int):
        self.vocab_size = vocab - 3
        self.mask_id, self.eos_id, self.pad_id = vocab - 3, vocab - 2, vocab - 1

    def decode(self, ids) -> str:
        return ""


def shape_args(name: str, args) -> dict:
    kw = dict(SHAPES[name])
    if args.tiny:
        kw.update(TINY, **(TINY_MOE if kw.get("n_experts") else {}))
    if args.layers:
        kw["n_layers"] = args.layers
    kw["max_seq_len"] = args.prompt_len + args.new_tokens
    return kw


def build(kw: dict, dtype: torch.dtype, device: torch.device, seed: int = 0) -> Transformer:
    """Random weights made on the device, in the dtype (no fp32 copy of a 16B model first)."""
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return Transformer(ModelArgs(**kw)).eval()
    finally:
        torch.set_default_dtype(old)


def tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def weight_bytes_per_forward(model: Transformer) -> int:
    skip = set()
    if not model.args.tie_embeddings:  # a lookup reads L rows of the table, not the table
        skip.add(id(model.model.embed_tokens.weight))
    if model.model.embed_positions is not None:
        skip.add(id(model.model.embed_positions.weight))
    persistent = [b for m in model.modules() for n, b in m.named_buffers(recurse=False)
                  if n not in m._non_persistent_buffers_set]
    return tensor_bytes(t for t in list(model.parameters()) + persistent if id(t) not in skip)


def kv_bytes(kw: dict, max_len: int, dtype: torch.dtype) -> int:
    return 2 * kw["n_layers"] * kw["n_kv_heads"] * max_len * kw["head_dim"] * torch.empty((), dtype=dtype).element_size()


def weight_bytes_per_forward_hf(hf) -> int:
    emb = hf.get_input_embeddings().weight
    tied = emb is hf.get_output_embeddings().weight
    return tensor_bytes(p for p in hf.parameters() if tied or p is not emb)
