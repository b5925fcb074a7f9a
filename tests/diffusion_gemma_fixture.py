"""A tiny random DiffusionGemma written by transformers' own save_pretrained (tests/test_diffusion_gemma*.py).

Two local layers (head_dim 8, 2 KV heads, window 6) and a global one (head_dim 16, 1 KV head, no
v_proj, proportional RoPE over a quarter of its frequency pairs), 4 experts top-2 beside the dense
MLP, canvas 4; every weight, norm, router scale and layer_scalar random, so a wrong switch shows.
The tokenizer is tests/family_fixtures' byte-level one with <pad> <eos> <bos> at 256..258."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from family_fixtures import write_tokenizer

PAD, EOS, BOS = 256, 257, 258
VOCAB = 264
CANVAS = 4
WINDOW = 6
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
            sliding_window=WINDOW, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            num_experts=4, top_k_experts=2, moe_intermediate_size=16, max_position_embeddings=128,
            pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
VISION = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=16, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=2, head_dim=8)


def write_diffusion_gemma(d: Path, seed: int = 0, **text):
    """-> the transformers model (eval, fp32, its default sdpa attention) whose save_pretrained wrote d.
    (Setting "eager" on text_config alone would be wrong: the decoder's padding mask is built for the
    top-level config's implementation, a bool mask, which eager attention would add as 0 / 1.)"""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    cfg = DiffusionGemmaConfig(text_config={**TEXT, **text}, vision_config=VISION, canvas_length=CANVAS)
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.2 * noise if p.dim() == 1 else 0.3 * noise)
        # a weaker self-conditioning feedback: at full strength this random model amplifies a 1e-6 float
        # difference ~5x per denoising step, so no two implementations could agree on tokens for long
        for proj in ("gate_proj", "up_proj", "down_proj"):
            getattr(model.model.decoder.self_conditioning, proj).weight.mul_(0.3)
        for i in range(cfg.text_config.num_hidden_layers):  # buffers are not tied: one value for both passes
            value = 0.5 + torch.rand(1, generator=g)
            model.model.decoder.layers[i].layer_scalar.copy_(value)
            model.model.encoder.language_model.layers[i].layer_scalar.copy_(value)
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d)
    write_tokenizer(d, ["<pad>", "<eos>", "<bos>"], "<eos>")
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "pad_token": "<pad>", "bos_token": "<bos>"}))
    return model
