"""Checkpoint averaging: the weighted mean of several checkpoints' weights, written as a new checkpoint.

The checkpoints a run keeps along its way (`keep_every`: RUN-atSTEP) lie on one trajectory; their mean (a
"model soup" of one run, as fairseq's average_checkpoints or stochastic weight averaging take it) is a cheap
candidate that smooths the last steps' noise, to be chosen or rejected on validation prompts like any other
checkpoint (benchmarks/select_checkpoint.py). Averaging is only meaningful between checkpoints of one
architecture and one tokenizer: everything but the weights must agree, or nothing is written.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import Tensor

from orl.atomic_dir import check_apart, file_digest

# manifest fields that must be equal in every input (what the weights mean and how they are decoded)
SAME = ("family", "model_args", "dtype", "quantization", "block_len", "mask_id", "eos_id", "pad_id", "residual_mode",
        "objective")
# what the average keeps from its last input's manifest besides those (the tasks it was trained on, for `orl tasks`)
CARRIED = ("block_len", "mask_id", "eos_id", "pad_id", "residual_mode", "objective", "recipe")
# files besides the weights that define the checkpoint: the tokenizer's and the generation defaults
DEFINING = ("config.json", "orl_tokenizer.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
            "chat_template.jinja", "generation_config.json")


class AverageError(ValueError):
    pass


def normalized_weights(n: int, weights: list[float] | None) -> list[float]:
    """n inputs' weights summing to 1 (uniform when None); each must be finite and > 0."""
    if n < 2:
        raise AverageError(f"averaging needs at least 2 checkpoints, got {n}")
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise AverageError(f"{len(weights)} weights for {n} checkpoints")
    if bad := [w for w in weights if not (math.isfinite(w) and w > 0)]:
        raise AverageError(f"weights must be finite and > 0, got {bad}")
    total = sum(weights)
    return [w / total for w in weights]


def accumulate(total: dict[str, Tensor] | None, state: dict[str, Tensor], weight: float, name: str) -> dict[str, Tensor]:
    """total + weight x state for floating tensors (in float64, so the order of the inputs does not change the
    result's last bits); other tensors (integer buffers) must be equal in every input. `name` is the input's,
    for errors."""
    if total is None:
        return {k: v.double() * weight if v.is_floating_point() else v.clone() for k, v in state.items()}
    if missing := sorted(total.keys() ^ state.keys()):
        raise AverageError(f"{name}: tensor names differ from the first checkpoint's: {', '.join(missing[:5])}")
    for k, v in state.items():
        if v.shape != total[k].shape:
            raise AverageError(f"{name}: {k} has shape {tuple(v.shape)}, the first checkpoint {tuple(total[k].shape)}")
        if v.is_floating_point():
            total[k] += v.double() * weight
        elif not torch.equal(v, total[k]):
            raise AverageError(f"{name}: the integer tensor {k} differs from the first checkpoint's; it cannot be averaged")
    return total


def same_dir(a: Path, b: Path) -> bool:
    return os.path.samefile(a, b) if a.exists() and b.exists() else a.resolve() == b.resolve()


def defining_digests(d: Path) -> dict[str, str]:
    return {f: file_digest(d / f) for f in DEFINING if (d / f).is_file()}


def average_checkpoints(dirs: list[str | os.PathLike], out: str | os.PathLike,
                        weights: list[float] | None = None) -> Path:
    """Write the weighted mean of `dirs`' weights to `out` (a new checkpoint; the inputs are only read). The
    manifest records every input (path, weight, training step, file digests) under `averaged_from`."""
    from orl.checkpoint import load_checkpoint, read_manifest, save_checkpoint

    paths = [Path(d) for d in dirs]
    w = normalized_weights(len(paths), weights)
    for i, p in enumerate(paths):
        if twice := [q for q in paths[:i] if same_dir(p, q)]:
            raise AverageError(f"{p} is given twice (as {twice[0]}); weigh one checkpoint more with --weights instead")
        check_apart(Path(out), p, "input")
    # everything but the weights is compared before any weight is read
    first, first_files = read_manifest(paths[0]), defining_digests(paths[0])
    for p in paths:
        m = read_manifest(p)
        if m.get("quantization") is not None:
            raise AverageError(f"{p} is quantized ({m['quantization'].get('kind')}); average the full-precision "
                               "checkpoints, then quantize the average (orl quantize)")
        if diff := [k for k in SAME if m.get(k) != first.get(k)]:
            raise AverageError(f"{p} differs from {paths[0]} in {', '.join(diff)}: only checkpoints of one model "
                               "can be averaged")
        if (files := defining_digests(p)) != first_files:
            diff = sorted(k for k in files.keys() | first_files.keys() if files.get(k) != first_files.get(k))
            raise AverageError(f"{p} differs from {paths[0]} in {', '.join(diff)} (tokenizer or config files)")
    total, sources = None, []
    for p, wi in zip(paths, w):
        model, tokenizer, manifest = load_checkpoint(p)  # checksums and sizes checked before allocation
        total = accumulate(total, model.state_dict(), wi, str(p))
        sources.append({"path": str(p), "weight": wi, "step": (manifest.get("recipe") or {}).get("step"),
                        "files": manifest.get("files")})
        last = manifest
    state = model.state_dict()
    with torch.no_grad():
        for k, v in state.items():
            v.copy_(total[k].to(v.dtype) if v.is_floating_point() else total[k])
    keep = {k: last[k] for k in CARRIED if k in last}
    keep["averaged_from"] = sources
    return save_checkpoint(model, tokenizer, out, manifest=keep)
