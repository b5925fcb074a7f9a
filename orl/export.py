"""Export an orl checkpoint as a Hugging Face repo that transformers loads with equal logits.

- A model Qwen3 can express (no learned positions, no scalable softmax, no shifted read-out, no adapter,
  q/k norm on) is
  written as a plain Qwen3 / Qwen3-MoE directory: `AutoModelForCausalLM.from_pretrained(dir)`.
- Any other orl model (the tiny dLLMs, ORL models with their adapter) ships orl's own model code as
  modeling_orl.py (orl/export_bundle.py): `AutoModelForCausalLM.from_pretrained(dir,
  trust_remote_code=True)`; its forward is orl's, so logits are equal by construction.
Either way the directory holds a tokenizer that `AutoTokenizer` loads with orl's ids (the character
tokenizer is written as a tokenizers WordLevel model over single characters), generation_config.json
with EOS and pad, and orl.json, so orl loads the export back unchanged.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from orl.checkpoint import DERIVED, recorded_verifier, save_checkpoint
from orl.model import ModelArgs, Transformer
from orl.model.families import family_for
from orl.tokenizer import SPECIALS, CharTokenizer


class ExportError(ValueError):
    pass


def not_exportable(args: ModelArgs) -> str | None:
    """Why the model has no plain transformers equivalent (Qwen3 / Gemma 3), or None when it has one."""
    import torch

    extras = family_for(args).config_from_args(args, torch.float32).get("orl_extensions")
    if not extras:
        return None
    return "Qwen3 cannot express " + ", ".join(f"{k}={v}" for k, v in extras.items())


def export_hf(model: Transformer, tokenizer, directory: str | os.PathLike, manifest: dict | None = None,
              remote_code: bool | None = None) -> Path:
    """remote_code None: a plain transformers directory where the model fits one, else modeling_orl.py."""
    from orl.export_bundle import MODELING_FILE, modeling_source, remote_code_config
    from orl.model.families.common import dtype_name

    quant = (manifest or {}).get("quantization") or next(
        (str(t.dtype) for t in model.state_dict().values() if t.dtype in (torch.int8, torch.uint8)
         or t.dtype.is_floating_point and t.element_size() == 1), None)
    if getattr(model, "verifier_record", None) or recorded_verifier(manifest):
        raise ExportError("cannot export a draft-only checkpoint (orl.train.draft_only): its clean rows never trained, "
                          "so as a causal LM it would be its untrained AR path; it decodes only beside its verifier")
    if quant:
        raise ExportError(f"cannot export a quantized model ({quant}): transformers would read its packed weights "
                          "as plain ones; export the unquantized checkpoint")
    reason = not_exportable(model.args)
    if remote_code is False and reason:
        raise ExportError(f"cannot export to a plain transformers directory: {reason}")
    use_remote = bool(reason) if remote_code is None else remote_code
    eos = list(getattr(tokenizer, "eos_ids", ()) or [tokenizer.eos_id])  # end of turn too: generate stops at each
    files = {"generation_config.json": _json({"eos_token_id": eos[0] if len(eos) == 1 else eos,
                                              "pad_token_id": tokenizer.pad_id, "do_sample": False})}
    if isinstance(tokenizer, CharTokenizer):
        files.update(char_tokenizer_files(tokenizer))
    # every decode setting travels (layout, sub-block, EOS ids and tokens, mask token...): the export must decode
    # as its source does; what the model and the write derive, and the source's own file list, do not
    keep = {k: v for k, v in (manifest or {}).items() if k not in (*DERIVED, "files", "git_commit", "source")}
    config = None
    if use_remote:
        files[MODELING_FILE] = modeling_source().encode()
        dtype = dtype_name(next(model.parameters()).dtype)
        config = remote_code_config(model.args.to_dict(), dtype, tokenizer, keep.get("block_len"))
    return save_checkpoint(model, tokenizer, directory, keep, extra_files=files, config=config)


def char_tokenizer_files(tok: CharTokenizer) -> dict[str, bytes]:
    """tokenizer.json + tokenizer_config.json that AutoTokenizer turns into orl's character ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(tok.itos)}
    hf = Tokenizer(models.WordLevel(vocab, unk_token=None))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one token per character
    hf.decoder = decoders.Fuse()  # join without spaces
    hf.add_special_tokens(list(SPECIALS))
    names = dict(zip(("pad_token", "eos_token", "mask_token"), SPECIALS))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30, **names,
              "clean_up_tokenization_spaces": False}
    return {"tokenizer.json": hf.to_str(pretty=True).encode(), "tokenizer_config.json": _json(config)}


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()
