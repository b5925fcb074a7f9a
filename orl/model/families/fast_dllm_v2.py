"""Fast-dLLM v2 (`model_type: "Fast_dLLM_Qwen"`): a Qwen2.5 body turned block-diffusion.

Published layout (Efficient-Large-Model/Fast_dLLM_v2_*B, NVlabs/Fast-dLLM v2/modeling.py): transformers'
Qwen2 names, q/k/v biases, no q/k norm. Blocks of `bd_size` (32) on the absolute grid from position 0,
block-causal across blocks, bidirectional inside; each block decodes in sub-blocks of 8
(`small_block_size`, a generate() argument, not in the config). Logits are read out shifted (the
block's first token off the last clean position). The mask token is "|<MASK>|" (151665); the chat
models stop at <|im_end|> (151645) as well as the config's eos.
"""
from __future__ import annotations

from torch import Tensor

from orl.model.args import ModelArgs
from orl.model.families.common import Problems, UnsupportedConfig, decode_defaults
from orl.model.families.qwen2 import body_args

MODEL_TYPES = ("Fast_dLLM_Qwen",)
MASK_TOKEN = "|<MASK>|"
END_OF_TURN = "<|im_end|>"
BLOCK, SUB_BLOCK = 32, 8  # the config's bd_size default and generate()'s small_block_size


def args_from_config(cfg: dict) -> ModelArgs:
    if cfg.get("model_type") not in MODEL_TYPES:
        raise UnsupportedConfig(f"model_type {cfg.get('model_type')!r} is not Fast_dLLM_Qwen")
    problems = Problems()
    kw = body_args(cfg, problems)
    problems.flag(cfg, "bd_size", lambda v: not isinstance(v, int) or v <= 0 or v % SUB_BLOCK,
                  f"a positive multiple of the {SUB_BLOCK}-token sub-block")
    problems.raise_if_any("Fast-dLLM v2")
    return ModelArgs(**kw, shift_logits=True)


def manifest_from_config(cfg: dict) -> dict:
    return decode_defaults("absolute_grid", cfg.get("bd_size", BLOCK), MASK_TOKEN, cfg,
                           sub_block_len=SUB_BLOCK, eos_tokens=[END_OF_TURN])


def to_native(tensors: dict[str, Tensor], args: ModelArgs | None = None) -> dict[str, Tensor]:
    return tensors
