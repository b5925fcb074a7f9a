"""The AR base of a conversion (orl.train.convert): loading it, its mask token, its digests, the
diffusion model on its weights.

Mask token. Block diffusion needs one; many AR tokenizers (Qwen3's among them) have none. The base's
own mask token is used when its tokenizer names one (Gemma's <mask>). Otherwise `ConvertConfig
.mask_token` names the token to use: an existing added token of that string (a reserved one) is
reused, a new one is added at the tokenizer's next id - `<|MASK|>` for Qwen3 gets 151669, the token
and id SDAR / TraDo added to the same vocabulary, so a converted Qwen3 reads their prompts' mask the
same way. The id must be one of the model's embedding rows (Qwen3 pads 151,669 tokenizer ids to
151,936 rows, so it is an untrained padded row, learned by the conversion); growing the embedding is
not done. The mask must be a token of its own: not the EOS / end-of-turn, padding or BOS token (the
engine bans the mask from its outputs, so an EOS mask would never stop; a padding mask turns padding
into noise), not a token of the chat template (<|im_start|>, <think>: every chat prompt would hold
masks), not whitespace or an ordinary vocabulary token in any spelling (' ' or ' hello': the corpus
text would encode to masks). Anything else is a MaskTokenError naming the fix. The choice is
recorded in the run's manifest (`mask_token`, and `recipe.mask_token` with `added`) and in the saved
tokenizer_config.json.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch

from orl.model.model import Transformer


class MaskTokenError(ValueError):
    pass


def set_mask_token(tok, token: str, vocab_size: int, where: str) -> dict:
    """The base tokenizer's mask token, or `token` reused / added (module docstring); the record the
    manifest keeps: {"token", "id", "added"}."""
    from orl.tokenizer import TokenizerError

    if tok.mask_id is not None:
        return {"token": tok.token_str(tok.mask_id), "id": tok.mask_id, "added": False}
    if not token:
        raise MaskTokenError(f"{where}: the tokenizer has no mask token and block diffusion needs one; name one "
                             "with --set mask_token=... (e.g. '<|MASK|>', which SDAR adds to Qwen3)")
    if not hasattr(tok, "add_mask_token"):
        raise MaskTokenError(f"{where}: a {type(tok).__name__} cannot take a new token ({token!r}); give the base a "
                             "tokenizer with a mask token")
    if any(c.isspace() for c in token):
        raise MaskTokenError(f"{where}: mask_token {token!r} contains whitespace: the corpus text holding it would "
                             "encode to masks; choose a markup string such as '<|MASK|>'")
    reused = tok.token_id(token)
    roles = {"EOS": {tok.eos_id, *(getattr(tok, "eos_ids", None) or ())}, "padding": {tok.pad_id},
             "BOS": {getattr(tok, "bos_id", None)}}
    for role, role_ids in roles.items():
        if reused is not None and reused in role_ids:
            raise MaskTokenError(f"{where}: mask_token {token!r} (id {reused}) is the tokenizer's {role} token: "
                                 "the mask must be a token of its own (e.g. '<|MASK|>', added at the next id)")
    if token in (getattr(tok, "chat_template", None) or ""):
        raise MaskTokenError(f"{where}: mask_token {token!r} appears in the chat template, so every chat prompt "
                             "would hold masks; choose a token the model never reads (e.g. '<|MASK|>')")
    try:
        tid, added = tok.add_mask_token(token)
    except TokenizerError as e:
        raise MaskTokenError(f"{where}: mask_token: {e}") from None
    if tid >= vocab_size:
        raise MaskTokenError(f"{where}: mask token {token!r} would get id {tid}, outside the model's {vocab_size} "
                             "embedding rows (every row is a token already); growing the embedding is not "
                             "supported: reuse a special token the model does not need (--set mask_token=...)")
    return {"token": token, "id": tid, "added": added}


def load_base(cfg, device) -> tuple[Transformer, object, dict, dict]:
    """(AR model in fp32 - the master weights AdamW updates -, tokenizer with its mask token, the base's
    manifest, the mask token record)."""
    from orl.checkpoint import CheckpointError, load_checkpoint

    if not cfg.base:
        raise ValueError("the convert recipe needs an AR checkpoint: --base DIR (e.g. the one `orl fetch "
                         "gemma-3-270m` writes)")
    # a bf16 checkpoint (Qwen3) would otherwise train in bf16, where AdamW steps of lr 2e-5 round away
    model, tok, manifest = load_checkpoint(cfg.base, device=device, dtype=torch.float32)
    if manifest.get("objective") == "block_diffusion" or model.args.shift_logits:
        raise CheckpointError(f"{cfg.base} is already a block-diffusion model; convert takes an autoregressive one")
    mask = set_mask_token(tok, cfg.mask_token, model.args.vocab_size, cfg.base)
    return model, tok, manifest, mask


def base_digest(base: str | Path, manifest: dict, part: str = "") -> str:
    """A digest of the base's files whose names contain `part` ("tokenizer": tokenizer.json,
    tokenizer_config.json and a character tokenizer's orl_tokenizer.json, which a prefix missed, so
    that every character-level base shared one key): from orl.json's checksums, or for a plain Hugging
    Face directory (no orl.json) from the files themselves, so that two bases never share a corpus key."""
    from orl.atomic_dir import file_digest

    files = manifest.get("files")
    if not files:
        files = {p.name: file_digest(p) for p in sorted(Path(base).iterdir()) if p.is_file()}
    files = {k: v for k, v in files.items() if part in k}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def to_diffusion(model: Transformer) -> Transformer:
    """The same weights with the shifted read-out (nothing is copied: the tensors are shared)."""
    args = replace(model.args, shift_logits=True)
    with torch.device("meta"):
        out = Transformer(args)
    out.load_state_dict(model.state_dict(), strict=True, assign=True)
    if args.tie_embeddings:
        out.lm_head.weight = out.model.embed_tokens.weight
    return out
