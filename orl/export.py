"""Export a native model as a directory that transformers' `Qwen3ForCausalLM.from_pretrained` (or
Qwen3MoeForCausalLM) loads, for running it through `generate` as a peer of orl's own decoders.

The weights and config.json are what save_checkpoint writes (parameter names are already Qwen3's);
the directory also keeps orl.json, so orl loads it back unchanged. Models with features Qwen3 cannot
express (a learned position table, the residual adapter, no q/k norm, a shared expert) are refused:
transformers would load them silently as a different model. generation_config.json carries EOS and
pad, which `generate` reads from there (a char tokenizer is not a transformers tokenizer).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from orl.checkpoint import save_checkpoint
from orl.model import ModelArgs, Transformer
from orl.model.families import qwen3


class ExportError(ValueError):
    pass


def not_exportable(args: ModelArgs) -> str | None:
    """Why the model has no transformers Qwen3 equivalent, or None when it has one."""
    import torch

    extras = qwen3.config_from_args(args, torch.float32).get("orl_extensions")
    if not extras:
        return None
    return "Qwen3 cannot express " + ", ".join(f"{k}={v}" for k, v in extras.items())


def export_hf(model: Transformer, tokenizer, directory: str | os.PathLike) -> Path:
    reason = not_exportable(model.args)
    if reason:
        raise ExportError(f"cannot export to a transformers Qwen3 directory: {reason}")
    gen = {"eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id, "do_sample": False}
    return save_checkpoint(model, tokenizer, directory,
                           extra_files={"generation_config.json": (json.dumps(gen, indent=2) + "\n").encode()})
