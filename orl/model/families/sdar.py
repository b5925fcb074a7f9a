"""SDAR and TraDo (`model_type: "sdar"` / `"sdar_moe"`): Qwen3 / Qwen3-MoE bodies decoded in blocks.

Published layout (JetLM/SDAR-*, Gen-Verse/TraDo-*; JetAstra/SDAR modeling_sdar.py): transformers' Qwen3 /
Qwen3-MoE keys and tensor names (q/k RMSNorm, no biases), logits read at each position (no shift).
Blocks lie on the absolute grid from position 0, block-causal across blocks: the prompt is prefilled
block by block and the first canvas completes the prompt's last, partial block. The block size is a
decode setting; a config that carries it (`block_size`, as some TraDo / UNO exports do) is read,
else SDAR's published default of 4. The mask token is "<|MASK|>" (151669), added to the Qwen3
vocabulary by SDAR; `mask_token_id` in the config wins when present.
"""
from __future__ import annotations

from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families import qwen3
from orl.model.families.common import Problems, UnsupportedConfig, decode_defaults

MODEL_TYPES = ("sdar", "sdar_moe")
MASK_TOKEN = "<|MASK|>"
END_OF_TURN = "<|im_end|>"
DEFAULT_BLOCK = 4


def args_from_config(cfg: dict) -> ModelArgs:
    model_type = cfg.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {model_type!r} is not an SDAR type {MODEL_TYPES}")
    problems = Problems()
    kw = qwen3.body_args(cfg, problems, moe=model_type == "sdar_moe")
    problems.flag(cfg, "block_size", lambda v: not isinstance(v, int) or v <= 0, "a positive block size")
    problems.raise_if_any("SDAR")
    return ModelArgs(**kw)


def manifest_from_config(cfg: dict) -> dict:
    block = cfg.get("block_size") or cfg.get("block_length") or DEFAULT_BLOCK
    return decode_defaults("absolute_grid", block, MASK_TOKEN, cfg, eos_tokens=[END_OF_TURN])


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    return qwen3.to_native(tensors)  # a fused-expert state dict (transformers 5 in memory) splits the same way
