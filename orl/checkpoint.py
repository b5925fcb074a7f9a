"""Checkpoints: Hugging Face-layout directories plus the orl.json manifest (DESIGN section 7).

A directory holds config.json (Qwen3-compatible), model.safetensors or shards with an index,
tokenizer files and orl.json. orl.json, when present, is what the model is built from: it can say
things config.json cannot (adapter, learned positions). Without it the directory is a plain
transformers checkpoint, read through its family's config reader.
"""
from __future__ import annotations

import json
import os
import subprocess
import weakref
from pathlib import Path
from types import ModuleType

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from orl.atomic_dir import MANIFEST, MARK, RUN_FILES, NotOrlDirectory, file_digest, write_atomically
from orl.checkpoint_checks import (QUANTIZED_MODEL_TYPE, CheckpointError, check_config_agrees, check_decode_fields,
                                   check_sizes, read_json, validate_tensors, verify_checksums)
from orl.device import resolve_device
from orl.model import ModelArgs, Transformer
from orl.model.families import family_for, get_family
from orl.model.families.common import config_dtype, dtype_from_name, dtype_name, token_ids
from orl.quant import QuantizationError, kind_of_spec, quantization_of, quantize, quantized_names
from orl.tokenizer import CharTokenizer, HFTokenizer, TokenizerError, load_tokenizer, resolve_special_ids

FORMAT_VERSION = 1
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# derived from the model itself; a caller's manifest may not contradict them
DERIVED = ("format_version", "family", "model_args", "dtype", "quantization")
Tokenizer = CharTokenizer | HFTokenizer


# ---------------------------------------------------------------- save

def save_checkpoint(model: Transformer, tokenizer: Tokenizer, directory: str | os.PathLike, manifest: dict | None = None,
                    max_shard_bytes: int = 2**31, extra_files: dict[str, bytes] | None = None,
                    config: dict | None = None, state: dict[str, Tensor] | None = None) -> Path:
    """Write the checkpoint atomically (orl.atomic_dir): a crash leaves the old directory or the new one,
    and a directory orl did not write is never replaced. extra_files: name -> bytes written inside the
    same atomic write (trainer state); config: a config.json to write instead of the family's (exports);
    state: the weights when model.state_dict() does not hold them whole (an FSDP-sharded model's,
    gathered: orl.train.fsdp.full_state). The manifest records a checksum of every file."""
    args = model.args
    state = {k: v.detach().cpu().contiguous() for k, v in (model.state_dict() if state is None else state).items()}
    if args.tie_embeddings:
        state.pop("lm_head.weight")  # like transformers: the tie is in config.json, not in the file
    # the model dtype is its parameters'; buffers (LLaDA2's fp32 expert_bias) and quantized storage
    # (int8 / float8 / packed, orl.quant) are saved in their own dtypes
    params = {n for n, _ in model.named_parameters()} - quantized_names(model)
    dtypes = {t.dtype for n, t in state.items() if n in params}
    if len(dtypes) != 1:
        raise ValueError(f"model has mixed parameter dtypes {sorted(map(str, dtypes))}; cast it with model.to(dtype) first")
    dtype = dtypes.pop()
    full = {"format_version": FORMAT_VERSION, "family": family_for(args).family_name(args), "model_args": args.to_dict(),
            "dtype": dtype_name(dtype), "block_len": None, "mask_id": tokenizer.mask_id,
            "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id, "residual_mode": "off",
            "quantization": quantization_of(model), "recipe": None, "git_commit": _git_commit()}
    for key, value in (manifest or {}).items():
        if key in DERIVED and value != full[key]:
            raise ValueError(f"manifest key {key!r} is derived from the model ({full[key]!r}), got {value!r}")
    full.update(manifest or {})
    if config is None:
        config = family_for(args).config_from_args(args, dtype)
        config.update(eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
        if full["quantization"]:
            # transformers would read the int8 / float8 / packed storage as plain weights (a warning, then
            # garbage): a model_type it does not know makes it refuse the directory instead
            config["model_type"] = QUANTIZED_MODEL_TYPE

    def fill(tmp: Path) -> None:
        _write_weights(state, tmp, max_shard_bytes)
        tokenizer.save(tmp)
        _write_json(tmp / "config.json", config)
        for name, data in (extra_files or {}).items():
            (tmp / name).write_bytes(data)
        # the manifest goes last: a copy that has one is complete (orl.atomic_dir.recover)
        full["files"] = {p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.name not in (*RUN_FILES, MARK)}
        _write_json(tmp / MANIFEST, full)

    try:
        return write_atomically(Path(directory), fill)
    except NotOrlDirectory as e:
        raise CheckpointError(str(e)) from None


def _write_weights(state: dict[str, Tensor], d: Path, max_shard_bytes: int) -> None:
    shards: list[dict[str, Tensor]] = [{}]
    size = 0
    for name, t in state.items():  # model order, so each layer stays in one or two shards
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    meta = {"format": "pt"}  # transformers refuses safetensors files without it
    if len(shards) == 1:
        save_file(shards[0], d / SINGLE, metadata=meta)
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, d / fname, metadata=meta)
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(t.numel() * t.element_size() for t in state.values())
    _write_json(d / INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# ---------------------------------------------------------------- load

def require_objective(manifest: dict, expected: str, directory) -> None:
    """Refuse weights trained for another decoder (a missing field - HF imports, older checkpoints -
    passes): an autoregressive model under the block-diffusion engine yields fluent garbage."""
    got = manifest.get("objective")
    if got is not None and got != expected:
        hint = {"autoregressive": "decode it with orl.engine.ar.ARDecoder (orl bench --ar)",
                "diffusion_gemma": "decode it with orl.engine.canvas.CanvasDecoder (orl generate)"}.get(
            got, "decode it with orl.engine.Engine (orl generate / eval)")
        def a(word: str) -> str:
            return ("an " if word[:1] in "aeiou" else "a ") + word
        raise CheckpointError(f"{directory} holds {a(got)} model, not {a(expected)} one: {hint}")


def recorded_verifier(manifest: dict | None) -> dict:
    """orl.json recipe.verifier of a draft-only checkpoint (a conversion or a draft run with draft_only:
    orl.train.draft_only); {} for any other checkpoint."""
    return ((manifest or {}).get("recipe") or {}).get("verifier") or {}


REPO = Path(__file__).resolve().parents[1]  # where the shipped checkpoints/ live


def portable_path(path: str | os.PathLike) -> str:
    """How a run records a checkpoint it depends on (a base, a verifier): relative to the repository when it lies
    inside it (a shipped checkpoint, so the record holds on any clone), else absolute."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def recorded_path(path: str) -> Path:
    """A path a manifest records (portable_path): a relative one is the repository's (never whatever the working
    directory holds under that name), unless only the working directory has it."""
    p = Path(path)
    return p if p.is_absolute() or (not (REPO / p).exists() and p.exists()) else REPO / p


def load_checkpoint(directory: str | os.PathLike, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> tuple[Transformer, Tokenizer, dict]:
    """-> (model in eval mode, tokenizer, manifest). Every mismatch is reported before any weight is used."""
    d = Path(directory)
    device = resolve_device(device)  # a bad --device fails before anything is read
    manifest, args, file_dtype, family = _read_config(d)
    try:
        quant_kind = kind_of_spec(manifest.get("quantization"))
    except QuantizationError as e:
        raise CheckpointError(f"{d / MANIFEST}: {e}") from None
    verify_checksums(d, manifest, weights=_weight_files(d))
    tokenizer = _load_tokenizer(d, manifest, args)
    # a cast happens tensor by tensor as the files are read (the file-dtype state never exists whole);
    # quantized checkpoints keep their storage dtypes and are cast as a module below (QuantLinear._apply)
    read_cast = dtype if quant_kind is None else None
    kept: dict[int, weakref.ref] = {}  # the tensors the cast left in a stored dtype of their own
    tensors = family.to_native(_read_tensors(d, file_dtype, read_cast, kept), args)  # published -> orl.model's
    check_sizes(args, tensors, d)  # before any module is built: a forged n_layers must not allocate
    with torch.device("meta"):
        model = Transformer(args)
    if quant_kind is not None:  # the transform that made the checkpoint, on the empty model: same names and dtypes
        quantize(model, quant_kind)
    validate_tensors(model, tensors, read_cast or file_dtype, d, file_dtype, kept)
    if args.tie_embeddings:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(tensors, strict=True, assign=True)
    if args.tie_embeddings:  # assign=True replaced embed_tokens.weight; re-point the head at it
        model.lm_head.weight = model.model.embed_tokens.weight
    model = model.to(device=device, dtype=None if read_cast else dtype).eval()
    # a draft-only checkpoint's clean rows never trained (orl.train.draft_only): the mark travels with the model,
    # so a decoder built without the manifest still refuses it alone (orl.engine.loaded)
    model.verifier_record = recorded_verifier(manifest) or None
    return model, tokenizer, manifest


def _read_config(d: Path) -> tuple[dict, ModelArgs, torch.dtype, ModuleType]:
    if d.is_file():
        raise CheckpointError(f"{d} is a file; give the checkpoint directory (the one holding config.json)")
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory {d} does not exist")
    man_path, cfg_path = d / MANIFEST, d / "config.json"
    if man_path.exists():
        m = read_json(man_path)
        if type(m.get("format_version")) is not int or m["format_version"] != FORMAT_VERSION:  # not True, not 1.0
            raise CheckpointError(f"{man_path}: unsupported format_version {m.get('format_version')!r} "
                                  f"(this orl reads version {FORMAT_VERSION})")
        parsed = _parsed(man_path, lambda: (m, ModelArgs.from_dict(m["model_args"]), dtype_from_name(m["dtype"]),
                                            get_family(m["family"])))
        check_decode_fields(man_path, m)
        if cfg_path.exists():
            check_config_agrees(cfg_path, parsed[3], parsed[1], parsed[2], quantized=bool(m.get("quantization")))
        return (_with_end_of_turn(m, parsed[3]), *parsed[1:])
    if not cfg_path.exists():
        raise CheckpointError(f"{d} is not a checkpoint: neither {MANIFEST} nor config.json exists")
    cfg = read_json(cfg_path)
    family = _parsed(cfg_path, lambda: get_family(cfg.get("model_type")))
    args, dtype = _parsed(cfg_path, lambda: (family.args_from_config(cfg), config_dtype(cfg)))
    m = {"format_version": None, "family": cfg["model_type"], "model_args": args.to_dict(),
         "dtype": dtype_name(dtype), "block_len": None, "residual_mode": "off", "quantization": None,
         "recipe": None, "git_commit": None, "source": "config.json"}
    if hasattr(family, "manifest_from_config"):  # a published dLLM: its layout, block size, mask / EOS tokens
        m.update(_parsed(cfg_path, lambda: family.manifest_from_config(cfg)))
    m["eos_ids"] = [*(m.get("eos_ids") or ()), *_generation_eos(d, cfg)]
    return _with_end_of_turn(m, family), args, dtype, family


def _generation_eos(d: Path, cfg: dict) -> list[int]:
    """EOS ids of a plain HF directory: transformers' generate stops at generation_config.json's
    eos_token_id (Gemma 3: [1, 106], <end_of_turn> included), which config.json often lacks."""
    path = d / "generation_config.json"
    gen = read_json(path) if path.exists() else {}
    return [*_parsed(d / "config.json", lambda: token_ids(cfg.get("eos_token_id"))),
            *_parsed(path, lambda: token_ids(gen.get("eos_token_id")))]


def _with_end_of_turn(m: dict, family: ModuleType) -> dict:
    """A family's end-of-turn token (family.END_OF_TURN) stops decoding too, also where the files do
    not list it (a GGUF import has one eos id): chat turns end with it."""
    if end_of_turn := getattr(family, "END_OF_TURN", None):
        m["eos_tokens"] = list(dict.fromkeys([*(m.get("eos_tokens") or ()), end_of_turn]))
    return m


def read_model_args(directory: str | os.PathLike) -> ModelArgs:
    """The checkpoint's ModelArgs (config checked), without reading a weight."""
    return _read_config(Path(directory))[1]


def read_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The checkpoint's tokenizer with its special ids resolved as load_checkpoint does, without reading a weight."""
    manifest, args, _, _ = _read_config(Path(directory))
    return _load_tokenizer(Path(directory), manifest, args)


def read_manifest(directory: str | os.PathLike) -> dict:
    """A checkpoint's manifest (or the one derived from its config.json), without touching the weights."""
    return _read_config(Path(directory))[0]


def _parsed(path: Path, build):
    """Run a config reader; a missing key or bad value becomes an error naming the file."""
    try:
        return build()
    except KeyError as e:
        raise CheckpointError(f"{path}: missing key {e}") from e
    except (ValueError, TypeError, ArithmeticError, AttributeError) as e:  # a 0 divisor, a string where an object goes
        raise CheckpointError(f"{path}: {e}") from e


def _load_tokenizer(d: Path, manifest: dict, args: ModelArgs) -> Tokenizer:
    try:
        tok = load_tokenizer(d)
    except TokenizerError as e:
        raise CheckpointError(str(e)) from e
    if tok.vocab_size > args.vocab_size:
        raise CheckpointError(f"{d}: tokenizer has {tok.vocab_size} tokens, the model's embedding only {args.vocab_size}")
    if tok.id_bound > args.vocab_size:  # ids with gaps: the count fits, the largest id does not
        raise CheckpointError(f"{d}: the tokenizer's largest id is {tok.id_bound - 1}, outside the model's embedding "
                              f"({args.vocab_size} rows)")
    # a base LM's tokenizer may lack a mask token that the diffusion manifest assigns
    try:
        resolve_special_ids(tok, manifest)  # mask / EOS ids decided in one place (orl.tokenizer)
    except (ValueError, TypeError) as e:  # an eos_ids entry that is no integer
        raise CheckpointError(f"{d}: bad special token id in the manifest (mask_id / eos_ids): {e}") from None
    if manifest.get("objective") == "block_diffusion" and tok.mask_id is None:
        raise CheckpointError(f"{d}: no mask token: the config gives no mask_token_id and the tokenizer has "
                              f"no {manifest.get('mask_token') or 'mask'!r} token (nor a mask_token in "
                              "tokenizer_config.json); a diffusion model needs one")
    for name in ("mask_id", "eos_id", "pad_id"):
        tid, mid = getattr(tok, name), manifest.get(name)
        if mid is not None and tid != mid:
            raise CheckpointError(f"{d}: tokenizer {name}={tid} but {MANIFEST} says {mid}")
        if tid is not None and type(tid) is not int:
            raise CheckpointError(f"{d}: {name}={tid!r} is not an integer")
        if tid is not None and not 0 <= tid < args.vocab_size:
            raise CheckpointError(f"{d}: tokenizer {name}={tid!r} is outside the model vocabulary ({args.vocab_size})")
        manifest[name] = tid
    # an end-of-turn id past the vocabulary is never sampled: decoding would silently run to the budget
    if bad := [i for i in tok.eos_ids if not 0 <= i < args.vocab_size]:
        raise CheckpointError(f"{d}: EOS id(s) {bad} (eos_ids / eos_token_id) are outside the model vocabulary "
                              f"({args.vocab_size})")
    return tok


def _weight_files(d: Path) -> list[str]:
    if (d / INDEX).exists():
        index = read_json(d / INDEX)
        if not isinstance(index.get("weight_map"), dict):
            raise CheckpointError(f"{d / INDEX}: no weight_map object")
        files = list(index["weight_map"].values())
        for f in files:
            if not isinstance(f, str) or Path(f).name != f or f.startswith("."):
                raise CheckpointError(f"{d / INDEX}: entry {f!r} points outside the checkpoint directory; "
                                      "only plain file names inside it are accepted")
        return sorted(set(files))
    if (d / SINGLE).exists():
        return [SINGLE]
    raise CheckpointError(f"no weights in {d}: expected {SINGLE} or {INDEX}")


def _read_tensors(d: Path, file_dtype: torch.dtype, cast: torch.dtype | None = None,
                  kept: dict[int, weakref.ref] | None = None) -> dict[str, Tensor]:
    """Every tensor of the weight files. cast: tensors stored in the model's dtype (file_dtype) become
    `cast` one at a time as they are read; a tensor stored in another dtype on purpose (LLaDA2's fp32
    expert_bias in a bf16 file) keeps it, and is recorded in `kept` (id -> weak reference) so that
    _validate still refuses a parameter stored in a dtype of its own that happens to be the cast's."""
    tensors: dict[str, Tensor] = {}
    for fname in _weight_files(d):
        path = d / fname
        if not path.exists():
            raise CheckpointError(f"weight file {path} listed in {INDEX} is missing")
        try:
            with safe_open(path, framework="pt") as f:
                part = {k: _cast(f.get_tensor(k), file_dtype, cast, kept) for k in f.keys()}
        except Exception as e:  # safetensors raises its own error type for truncated or corrupt files
            raise CheckpointError(f"cannot read weight file {path}: {e}") from e
        if twice := sorted(part.keys() & tensors.keys()):
            raise CheckpointError(f"tensor(s) {', '.join(twice)} appear in more than one weight file (again in {path})")
        tensors.update(part)
    return tensors


def _cast(t: Tensor, file_dtype: torch.dtype, cast: torch.dtype | None, kept: dict | None = None) -> Tensor:
    if cast is None:
        return t
    if t.dtype == file_dtype:
        return t.to(cast)
    if kept is not None:
        kept[id(t)] = weakref.ref(t)
    return t
