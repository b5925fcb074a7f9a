"""The checks a checkpoint passes before any of its weights is used (orl.checkpoint.load_checkpoint):
config.json against orl.json, file checksums, the config's sizes against the tensors (before a model
is built), and every tensor's name, shape, dtype and finiteness against the built model."""
from __future__ import annotations

import json
import re
import weakref
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

from orl.atomic_dir import MANIFEST, file_digest, listed_files
from orl.model import ModelArgs, Transformer
from orl.model.families.common import LAYOUTS
from orl.model.residual import RESIDUAL_MODES
from orl.quant import quantized_names


class CheckpointError(ValueError):
    pass


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got a {type(data).__name__}")
    return data


def check_decode_fields(path: Path, m: dict) -> None:
    """The manifest's decode defaults (every generate / eval / serve starts from them): a bad one is named
    with the file here, not later as an 'invalid DecodeConfig' that reads like the user's own flag."""
    problems = []
    if (b := m.get("block_len")) is not None and (type(b) is not int or b <= 0):
        problems.append(f"block_len must be a positive integer or null, got {b!r}")
    if (r := m.get("residual_mode")) is not None and r not in RESIDUAL_MODES:
        problems.append(f"residual_mode must be one of {RESIDUAL_MODES}, got {r!r}")
    if (lay := m.get("layout")) is not None and lay not in LAYOUTS:
        problems.append(f"layout must be one of {LAYOUTS}, got {lay!r}")
    if (rec := m.get("recipe")) is not None and not isinstance(rec, dict):
        problems.append(f"recipe must be an object or null, got {type(rec).__name__}")
    elif not isinstance((rec or {}).get("verifier") or {}, dict):
        problems.append("recipe.verifier must be an object (a draft-only checkpoint's verifier)")
    if problems:
        raise CheckpointError(f"{path}: " + "; ".join(problems))


# config.json's model_type in a quantized checkpoint (orl.checkpoint.save_checkpoint): transformers refuses it
QUANTIZED_MODEL_TYPE = "orl_quantized"


def check_config_agrees(cfg_path: Path, family: ModuleType, args: ModelArgs, dtype: torch.dtype,
                        quantized: bool = False) -> None:
    """config.json is what transformers reads, orl.json what orl reads: they must describe one model. A quantized
    checkpoint's model_type is QUANTIZED_MODEL_TYPE (or, written before it, the family's)."""
    cfg = read_json(cfg_path)
    if quantized and cfg.get("model_type") == QUANTIZED_MODEL_TYPE:
        cfg = {k: v for k, v in cfg.items() if k != "model_type"}
    if "orl_args" in cfg:  # an export read through its own modeling file (orl.hf_wrapper)
        want = {"orl_args": args.to_dict()}
    elif hasattr(family, "config_from_args"):
        want = family.config_from_args(args, dtype)
    else:
        return
    diff = [f"{k}: config.json {cfg[k]!r}, {MANIFEST} {v!r}" for k, v in want.items()
            if k in cfg and cfg[k] != v and k not in ("eos_token_id", "pad_token_id", "bos_token_id")]
    if diff:
        raise CheckpointError(f"{cfg_path.parent}: config.json and {MANIFEST} disagree ({len(diff)} field(s)):\n  "
                              + "\n  ".join(diff))


def verify_checksums(d: Path, manifest: dict, names: list[str] | None = None, weights: list[str] = ()) -> None:
    """Compare the files the manifest lists (those that are present, or `names`) with their recorded
    checksums: a flipped byte in a weight file is refused, with the file named. A manifest that lists files
    must list every weight file (`weights`): an unlisted one would be read unchecked."""
    try:
        listed = listed_files(manifest, d / MANIFEST)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    if listed is None:
        return  # a transformers checkpoint, or one written before checksums were recorded
    if unlisted := [w for w in weights if w not in listed]:
        raise CheckpointError(f"{d / MANIFEST}: its 'files' does not list the weight file(s) {unlisted}, so their "
                              "checksums cannot be checked (the manifest was edited, or the files were added later)")
    for name in names or sorted(listed):
        path = d / name
        if name not in listed or not path.is_file():
            if names:
                raise CheckpointError(f"{path}: missing or not recorded in {MANIFEST}")
            continue
        if file_digest(path) != listed[name]:
            raise CheckpointError(f"{path}: checksum mismatch (the file changed or was damaged after orl wrote it; "
                                  f"{MANIFEST} records {listed[name]})")


_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.(?:mlp|moe)\.experts\.(\d+)\.")  # moe: parallel_moe (Gemma 4)


def check_sizes(args: ModelArgs, tensors: dict[str, Tensor], d: Path) -> None:
    """The config's sizes against the tensors in the file, before the model is built (even on the meta
    device, a million layers take minutes and gigabytes of Python objects)."""
    problems = []
    layers = {int(m.group(1)) for n in tensors if (m := _LAYER.match(n))}
    if len(layers) != args.n_layers or layers != set(range(args.n_layers)):  # the count first: range(10**9) is 30 GB
        problems.append(f"n_layers is {args.n_layers} but the weights hold {len(layers)} layer(s)")
    experts: dict[int, set[int]] = {}
    for n in tensors:
        if m := _EXPERT.match(n):
            experts.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    if args.n_experts and not experts:  # else a forged n_experts builds that many modules (10**9: a hang)
        problems.append(f"n_experts is {args.n_experts} but the weights hold no expert")
    for layer, found in experts.items():
        if len(found) != args.n_experts or found != set(range(args.n_experts)):
            problems.append(f"n_experts is {args.n_experts} but layer {layer} holds {len(found)} expert(s)")
            break
    emb = tensors.get("model.embed_tokens.weight")
    if emb is not None and list(emb.shape) != [args.vocab_size, args.dim]:
        problems.append(f"vocab_size x dim is {args.vocab_size} x {args.dim} but model.embed_tokens.weight "
                        f"is {list(emb.shape)}")
    if problems:
        raise CheckpointError(f"checkpoint {d}: the config does not match the weights: " + "; ".join(problems))


def validate_tensors(model: Transformer, tensors: dict[str, Tensor], dtype: torch.dtype, d: Path,
              file_dtype: torch.dtype | None = None, kept: dict[int, weakref.ref] | None = None) -> None:
    expected = model.state_dict()
    if model.args.tie_embeddings:
        expected.pop("lm_head.weight")
        head, emb = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
        # some exporters write the tied head anyway; harmless only when it is the embedding
        if head is not None and emb is not None and head.shape == emb.shape and torch.equal(head, emb):
            del tensors["lm_head.weight"]
    problems = [f"missing tensor {n}" for n in expected if n not in tensors]
    problems += [f"unexpected tensor {n}" for n in tensors if n not in expected]
    quantized = quantized_names(model)  # their dtype is the quantization format's (orl.quant)
    # buffers may be stored in their own floating dtype (LLaDA2's expert_bias: fp32 in a bf16 file)
    own_dtype = {n for n, _ in model.named_buffers()} - quantized
    for n, want in expected.items():
        t = tensors.get(n)
        if t is None:
            continue
        if t.shape != want.shape:
            problems.append(f"shape mismatch {n}: checkpoint {list(t.shape)}, model expects {list(want.shape)}")
        if n in quantized and t.dtype != want.dtype:
            problems.append(f"dtype mismatch {n}: checkpoint {t.dtype}, the quantization format says {want.dtype}")
        elif n in own_dtype and not t.is_floating_point():
            problems.append(f"dtype mismatch {n}: checkpoint {t.dtype}, a floating-point buffer expected")
        elif n not in quantized and n not in own_dtype and stored_dtype(t, kept) is not None:
            problems.append(f"dtype mismatch {n}: checkpoint {t.dtype}, config says {file_dtype}")
        elif n not in quantized and n not in own_dtype and t.dtype != dtype:
            problems.append(f"dtype mismatch {n}: checkpoint {t.dtype}, config says {dtype}")
        elif t.is_floating_point() and not all_finite(t):
            problems.append(f"non-finite values (inf or nan) in {n}")
    if problems:
        raise CheckpointError(f"checkpoint {d} does not match its config ({len(problems)} problem(s)):\n  "
                              + "\n  ".join(problems))


def stored_dtype(t: Tensor, kept: dict[int, weakref.ref] | None) -> torch.dtype | None:
    """The dtype a tensor the cast left alone was stored in (None: it was cast, or no cast)."""
    ref = (kept or {}).get(id(t))
    return t.dtype if ref is not None and ref() is t else None


def all_finite(t: Tensor) -> bool:
    """One fp32 sum per tensor (a pass with no temporary; isfinite(t).all() builds a bool copy and
    cost ~20x more on gemma-3-270m, docs/BENCHMARKS.md): inf + x is never finite again, so any inf or
    nan makes the sum non-finite. Only then (or when finite values overflow the sum) the exact
    per-element scan decides. float8 has neither kernel: its values (e4m3 has NaN, no inf) go via fp32."""
    t = t if t.element_size() > 1 else t.float()
    acc = torch.float64 if t.dtype == torch.float64 else torch.float32
    return bool(torch.isfinite(t.sum(dtype=acc))) or bool(torch.isfinite(t).all())
