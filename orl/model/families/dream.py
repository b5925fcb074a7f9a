"""Dream and DiffuCoder (`model_type: "Dream"`): a Qwen2.5 body read out shifted.

Published layout (Dream-org/Dream-v0-*-7B, apple/DiffuCoder-7B-*): transformers' Qwen2 tensor names,
q/k/v biases, no q/k norm, head_dim = hidden_size // num_attention_heads whatever the config says.
Attention is bidirectional over prompt + the whole answer canvas (full-sequence layout), and the
logits for position i come from the hidden state at i - 1 (`diffusion_generate` shifts them:
logits = cat(logits[:, :1], logits[:, :-1])). The mask token is `mask_token_id` (151666,
"<|mask|>", in the published config).
"""
from __future__ import annotations

from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, decode_defaults
from orl.model.families.qwen2 import body_args

MODEL_TYPES = ("Dream",)
MASK_TOKEN = "<|mask|>"


def args_from_config(cfg: dict) -> ModelArgs:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not Dream")
    problems = Problems()
    heads = cfg["num_attention_heads"]
    problems.flag(cfg, "head_dim", lambda v: v and v != cfg["hidden_size"] // heads,
                  "Dream's attention uses hidden_size // num_attention_heads")
    kw = body_args(cfg, problems, head_dim=cfg["hidden_size"] // heads)
    problems.raise_if_any("Dream")
    return ModelArgs(**kw, shift_logits=True)


def manifest_from_config(cfg: dict) -> dict:
    # diffusion_generate has no blocks: one canvas of max_new_tokens (block_len None: the decoder's)
    return decode_defaults("full_sequence", None, MASK_TOKEN, cfg)


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    return tensors
