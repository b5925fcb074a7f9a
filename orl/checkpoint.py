"""Checkpoints: Hugging Face-layout directories plus the orl.json manifest (DESIGN section 7).

A directory holds config.json (Qwen3-compatible), model.safetensors or shards with an index,
tokenizer files and orl.json. orl.json, when present, is what the model is built from: it can say
things config.json cannot (adapter, learned positions). Without it the directory is a plain
transformers checkpoint, read through its family's config reader.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import ModuleType

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from orl.model import ModelArgs, Transformer
from orl.model.families import get_family, qwen3
from orl.model.families.common import config_dtype, dtype_from_name, dtype_name
from orl.tokenizer import CharTokenizer, HFTokenizer, TokenizerError, load_tokenizer

FORMAT_VERSION = 1
MANIFEST = "orl.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# derived from the model itself; a caller's manifest may not contradict them
DERIVED = ("format_version", "family", "model_args", "dtype")
Tokenizer = CharTokenizer | HFTokenizer


class CheckpointError(ValueError):
    pass


# ---------------------------------------------------------------- save

def save_checkpoint(model: Transformer, tokenizer: Tokenizer, directory: str | os.PathLike, manifest: dict | None = None,
                    max_shard_bytes: int = 2**31, extra_files: dict[str, object] | None = None) -> Path:
    """Write the checkpoint atomically: a crash leaves either the old directory or the new one.
    extra_files: name -> object saved with torch.save inside the same atomic write (trainer state)."""
    target = Path(directory).resolve()
    if target.exists() and not _is_replaceable(target):
        raise ValueError(f"refusing to replace {target}: it exists and is not a checkpoint directory")
    args = model.args
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if args.tie_embeddings:
        state.pop("lm_head.weight")  # like transformers: the tie is in config.json, not in the file
    dtypes = {t.dtype for t in state.values()}
    if len(dtypes) != 1:
        raise ValueError(f"model has mixed parameter dtypes {sorted(map(str, dtypes))}; cast it with model.to(dtype) first")
    dtype = dtypes.pop()
    full = {"format_version": FORMAT_VERSION, "family": qwen3.family_name(args), "model_args": args.to_dict(),
            "dtype": dtype_name(dtype), "block_len": None, "mask_id": tokenizer.mask_id,
            "eos_id": tokenizer.eos_id, "pad_id": tokenizer.pad_id, "residual_mode": "off",
            "quantization": None, "recipe": None, "git_commit": _git_commit()}
    for key, value in (manifest or {}).items():
        if key in DERIVED and value != full[key]:
            raise ValueError(f"manifest key {key!r} is derived from the model ({full[key]!r}), got {value!r}")
    full.update(manifest or {})
    config = qwen3.config_from_args(args, dtype)
    config.update(eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        _write_weights(state, tmp, max_shard_bytes)
        tokenizer.save(tmp)
        _write_json(tmp / "config.json", config)
        _write_json(tmp / MANIFEST, full)
        for name, obj in (extra_files or {}).items():
            torch.save(obj, tmp / name)
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _is_replaceable(target: Path) -> bool:
    """Only an empty directory or an earlier checkpoint may be swapped out (and then deleted)."""
    return target.is_dir() and (not any(target.iterdir()) or (target / MANIFEST).exists()
                                or (target / "config.json").exists())


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


def _swap_into_place(tmp: Path, target: Path) -> None:
    aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}") if target.exists() else None
    if aside:
        os.rename(target, aside)
    try:
        os.rename(tmp, target)
    except BaseException:
        if aside:
            os.rename(aside, target)
        raise
    _fsync(target.parent)
    if aside:
        shutil.rmtree(aside)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        hint = "decode it with orl.engine.ar.ARDecoder (orl bench --ar)" if got == "autoregressive" else \
            "decode it with orl.engine.Engine (orl generate / eval)"
        raise CheckpointError(f"{directory} holds a {got} model, not a {expected} one: {hint}")


def load_checkpoint(directory: str | os.PathLike, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> tuple[Transformer, Tokenizer, dict]:
    """-> (model in eval mode, tokenizer, manifest). Every mismatch is reported before any weight is used."""
    d = Path(directory)
    manifest, args, file_dtype, family = _read_config(d)
    if manifest.get("quantization") is not None:
        raise CheckpointError(f"{d}: quantization {manifest['quantization']!r} is not supported by this loader")
    tokenizer = _load_tokenizer(d, manifest, args)
    tensors = family.to_native(_read_tensors(d))
    with torch.device("meta"):
        model = Transformer(args)
    _validate(model, tensors, file_dtype, d)
    if args.tie_embeddings:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(tensors, strict=True, assign=True)
    if args.tie_embeddings:  # assign=True replaced embed_tokens.weight; re-point the head at it
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(device=device, dtype=dtype).eval(), tokenizer, manifest


def _read_config(d: Path) -> tuple[dict, ModelArgs, torch.dtype, ModuleType]:
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory {d} does not exist")
    man_path, cfg_path = d / MANIFEST, d / "config.json"
    if man_path.exists():
        m = _read_json(man_path)
        if m.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{man_path}: unsupported format_version {m.get('format_version')!r} "
                                  f"(this orl reads version {FORMAT_VERSION})")
        return _parsed(man_path, lambda: (m, ModelArgs.from_dict(m["model_args"]), dtype_from_name(m["dtype"]),
                                          get_family(m["family"])))
    if not cfg_path.exists():
        raise CheckpointError(f"{d} is not a checkpoint: neither {MANIFEST} nor config.json exists")
    cfg = _read_json(cfg_path)
    family = _parsed(cfg_path, lambda: get_family(cfg.get("model_type")))
    args, dtype = _parsed(cfg_path, lambda: (family.args_from_config(cfg), config_dtype(cfg)))
    m = {"format_version": None, "family": cfg["model_type"], "model_args": args.to_dict(),
         "dtype": dtype_name(dtype), "block_len": None, "residual_mode": "off", "quantization": None,
         "recipe": None, "git_commit": None, "source": "config.json"}
    return m, args, dtype, family


def _parsed(path: Path, build):
    """Run a config reader; a missing key or bad value becomes an error naming the file."""
    try:
        return build()
    except KeyError as e:
        raise CheckpointError(f"{path}: missing key {e}") from e
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path}: {e}") from e


def _load_tokenizer(d: Path, manifest: dict, args: ModelArgs) -> Tokenizer:
    try:
        tok = load_tokenizer(d)
    except TokenizerError as e:
        raise CheckpointError(str(e)) from e
    if tok.vocab_size > args.vocab_size:
        raise CheckpointError(f"{d}: tokenizer has {tok.vocab_size} tokens, the model's embedding only {args.vocab_size}")
    # a base LM's tokenizer may lack a mask token that the diffusion manifest assigns
    if manifest.get("mask_id") is not None and tok.mask_id is None:
        tok.mask_id = manifest["mask_id"]
    for name in ("mask_id", "eos_id", "pad_id"):
        tid, mid = getattr(tok, name), manifest.get(name)
        if mid is not None and tid != mid:
            raise CheckpointError(f"{d}: tokenizer {name}={tid} but {MANIFEST} says {mid}")
        if tid is not None and not 0 <= tid < args.vocab_size:
            raise CheckpointError(f"{d}: tokenizer {name}={tid} is outside the model vocabulary ({args.vocab_size})")
        manifest[name] = tid
    return tok


def _weight_files(d: Path) -> list[str]:
    if (d / INDEX).exists():
        index = _read_json(d / INDEX)
        if "weight_map" not in index:
            raise CheckpointError(f"{d / INDEX}: no weight_map")
        return sorted(set(index["weight_map"].values()))
    if (d / SINGLE).exists():
        return [SINGLE]
    raise CheckpointError(f"no weights in {d}: expected {SINGLE} or {INDEX}")


def _read_tensors(d: Path) -> dict[str, Tensor]:
    tensors: dict[str, Tensor] = {}
    for fname in _weight_files(d):
        path = d / fname
        if not path.exists():
            raise CheckpointError(f"weight file {path} listed in {INDEX} is missing")
        try:
            with safe_open(path, framework="pt") as f:
                part = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # safetensors raises its own error type for truncated or corrupt files
            raise CheckpointError(f"cannot read weight file {path}: {e}") from e
        if twice := sorted(part.keys() & tensors.keys()):
            raise CheckpointError(f"tensor(s) {', '.join(twice)} appear in more than one weight file (again in {path})")
        tensors.update(part)
    return tensors


def _validate(model: Transformer, tensors: dict[str, Tensor], dtype: torch.dtype, d: Path) -> None:
    expected = model.state_dict()
    if model.args.tie_embeddings:
        expected.pop("lm_head.weight")
        head, emb = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
        # some exporters write the tied head anyway; harmless only when it is the embedding
        if head is not None and emb is not None and head.shape == emb.shape and torch.equal(head, emb):
            del tensors["lm_head.weight"]
    problems = [f"missing tensor {n}" for n in expected if n not in tensors]
    problems += [f"unexpected tensor {n}" for n in tensors if n not in expected]
    for n, want in expected.items():
        t = tensors.get(n)
        if t is None:
            continue
        if t.shape != want.shape:
            problems.append(f"shape mismatch {n}: checkpoint {list(t.shape)}, model expects {list(want.shape)}")
        if t.dtype != dtype:
            problems.append(f"dtype mismatch {n}: checkpoint {t.dtype}, config says {dtype}")
    if problems:
        raise CheckpointError(f"checkpoint {d} does not match its config ({len(problems)} problem(s)):\n  "
                              + "\n  ".join(problems))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from e


# ---------------------------------------------------------------- describe

def describe(directory: str | os.PathLike) -> str:
    """Human summary for `orl info`: reads headers only, never the weights."""
    d = Path(directory)
    manifest, args, _, _ = _read_config(d)
    n_params = 0
    for fname in _weight_files(d):
        try:
            with safe_open(d / fname, framework="pt") as f:
                n_params += sum(torch.Size(f.get_slice(k).get_shape()).numel() for k in f.keys())
        except Exception as e:
            raise CheckpointError(f"cannot read weight file {d / fname}: {e}") from e
    a = args
    model = (f"dim {a.dim}, layers {a.n_layers}, heads {a.n_heads}/{a.n_kv_heads} kv, head_dim {a.head_dim}, "
             f"ffn {a.ffn_dim}, vocab {a.vocab_size}, qk_norm {a.qk_norm}, tied {a.tie_embeddings}")
    if a.n_experts:
        model += f", experts {a.n_experts} top-{a.n_experts_per_tok} ffn {a.moe_ffn_dim} every {a.moe_every}"
    if a.learned_pos:
        model += f", learned_pos {a.max_seq_len}"
    if a.shift_logits:
        model += ", shifted read-out (token i from position i-1)"
    if a.adapter_dim:
        model += f", adapter {a.adapter_dim} (alpha {a.adapter_alpha})"
    source = f"{MANIFEST} v{FORMAT_VERSION}" if (d / MANIFEST).exists() else f"config.json (no {MANIFEST})"
    lines = [f"checkpoint     {d.resolve()}",
             f"source         {source}",
             f"parameters     {n_params:,} ({n_params / 1e6:.2f}M)",
             f"model          {model}"]
    lines += [f"{k:<14} {v}" for k, v in manifest.items() if k not in ("model_args", "format_version", "source")]
    try:
        tok = load_tokenizer(d)
        lines.append(f"tokenizer      {tok.kind}, vocab {tok.vocab_size}")
    except TokenizerError as e:
        lines.append(f"tokenizer      error: {e}")
    lines.append("files")
    lines += [f"  {p.name:<40} {_human(p.stat().st_size):>10}" for p in sorted(d.iterdir()) if p.is_file()]
    return "\n".join(lines)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
