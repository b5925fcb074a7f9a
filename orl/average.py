"""Checkpoint averaging: the weighted mean of several checkpoints' weights, written as a new checkpoint.

The checkpoints a run keeps along its way (`keep_every`: RUN-atSTEP) lie on one trajectory; their mean (a
"model soup" of one run, as fairseq's average_checkpoints or stochastic weight averaging take it) is a cheap
candidate that smooths the last steps' noise, to be chosen or rejected on validation prompts like any other
checkpoint (benchmarks/select_checkpoint.py). Averaging is only meaningful between checkpoints of one
architecture, tokenizer and decoding setup: everything but the weights must agree, and the average keeps it
all (the manifest's decode fields, the inputs' config and tokenizer files byte for byte), or nothing is written.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from torch import Tensor

from orl.atomic_dir import RUN_FILES, OutputIsInput, check_apart, check_replaceable, same_dir

# manifest fields that belong to one checkpoint's history, not to what its weights mean: not compared, not carried
HISTORY = ("files", "git_commit", "recipe", "averaged_from", "quantized_from", "source")
# files besides the weights that define the checkpoint (tokenizer, chat template, generation defaults): equal in
# every input, and written into the average as they are
DEFINING = ("config.json", "orl_tokenizer.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
            "chat_template.jinja", "generation_config.json")


class AverageError(ValueError):
    pass


def normalized_weights(n: int, weights: list[float] | None) -> list[float]:
    """n inputs' weights summing to 1 (uniform when None); each must be finite and > 0, and so must their sum."""
    if n < 2:
        raise AverageError(f"averaging needs at least 2 checkpoints, got {n}")
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise AverageError(f"{len(weights)} weights for {n} checkpoints")
    if bad := [w for w in weights if not (math.isfinite(w) and w > 0)]:
        raise AverageError(f"weights must be finite and > 0, got {bad}")
    total = sum(weights)
    if not math.isfinite(total):
        raise AverageError(f"the weights' sum overflows ({weights}); give them on a smaller scale")
    return [w / total for w in weights]


def accumulate(total: dict[str, Tensor] | None, state: dict[str, Tensor], weight: float,
               name: str) -> dict[str, Tensor]:
    """total + weight x state, in place, for floating tensors (in float64, so the order of the inputs does not
    change the result's last bits); other tensors (integer buffers) must be equal in every input. `name` is the
    input's, for errors."""
    if total is None:
        return {k: v.double() * weight if v.is_floating_point() else v.clone() for k, v in state.items()}
    if missing := sorted(total.keys() ^ state.keys()):
        raise AverageError(f"{name}: tensor names differ from the first checkpoint's: {', '.join(missing[:5])}")
    for k, v in state.items():
        if v.shape != total[k].shape:
            raise AverageError(f"{name}: {k} has shape {tuple(v.shape)}, the first checkpoint {tuple(total[k].shape)}")
        if v.is_floating_point():
            total[k].add_(v.double(), alpha=weight)
        elif not torch.equal(v, total[k]):
            raise AverageError(f"{name}: the integer tensor {k} differs from the first checkpoint's; "
                               "it cannot be averaged")
    return total


def unique_state(model) -> dict[str, Tensor]:
    """model.state_dict() without the tied head (the embedding's own tensor: accumulated once, not twice)."""
    state = model.state_dict()
    if model.args.tie_embeddings:
        state.pop("lm_head.weight")
    return state


def defining_files(d: Path) -> dict[str, bytes]:
    return {f: (d / f).read_bytes() for f in DEFINING if (d / f).is_file()}


def check_inputs(paths: list[Path], out: Path) -> tuple[dict, dict[str, bytes]]:
    """Everything but the weights, before any weight is read -> (the manifest fields every input shares, their
    defining files)."""
    from orl.checkpoint import read_manifest

    check_replaceable(out)  # an --out that holds what orl did not write: refused before minutes of loading
    if out.is_dir() and any((out / f).exists() for f in (*RUN_FILES, "trainer_state.pt")):
        raise AverageError(f"--out {out} holds a training run (its trainer state or log): an average there would "
                           "replace the run's latest checkpoint; choose another --out")
    first, first_files, seen = read_manifest(paths[0]), defining_files(paths[0]), {}
    shared = {k: v for k, v in first.items() if k not in HISTORY}
    for i, p in enumerate(paths):
        if twice := [q for q in paths[:i] if same_dir(p, q)]:
            raise AverageError(f"{p} is given twice (as {twice[0]}); weigh one checkpoint more with --weights instead")
        try:
            check_apart(out, p, "input")
        except OutputIsInput:
            raise AverageError(f"--out {out} is, holds or lies inside the input {p}; "
                               "write the average elsewhere") from None
        m = read_manifest(p)
        if m.get("quantization") is not None:
            raise AverageError(f"{p} is quantized ({m['quantization'].get('kind')}); average the full-precision "
                               "checkpoints, then quantize the average (orl quantize)")
        mine = {k: v for k, v in m.items() if k not in HISTORY}
        if diff := sorted(k for k in mine.keys() | shared.keys() if mine.get(k) != shared.get(k)):
            raise AverageError(f"{p} differs from {paths[0]} in {', '.join(diff)}: only checkpoints of one model and "
                               "one decoding setup can be averaged")
        if (files := defining_files(p)) != first_files:
            diff = sorted(k for k in files.keys() | first_files.keys() if files.get(k) != first_files.get(k))
            raise AverageError(f"{p} differs from {paths[0]} in {', '.join(diff)} (config or tokenizer files)")
        digests = json.dumps(m.get("files"), sort_keys=True) if m.get("files") else None
        if digests in seen:  # a hard-linked keep_every copy is another directory holding the same checkpoint
            raise AverageError(f"{p} holds the same files as {seen[digests]}; weigh it more with --weights instead")
        if digests:
            seen[digests] = p
    return shared, first_files


def step_of(manifest: dict):
    recipe = manifest.get("recipe") or {}
    return recipe.get("step", recipe.get("update"))


def average_checkpoints(dirs: list[str | os.PathLike], out: str | os.PathLike,
                        weights: list[float] | None = None) -> Path:
    """Write the weighted mean of `dirs`' weights to `out` (a new checkpoint; the inputs are only read). The
    manifest records every input (path, weight, training step or update, file digests) under `averaged_from`,
    and as `recipe` only the tasks all inputs were trained on: the average is no point of any run (a run's
    keep_every never takes it for one of its own copies)."""
    from orl.checkpoint import DERIVED, load_checkpoint, save_checkpoint

    paths, out = [Path(d) for d in dirs], Path(out)
    w = normalized_weights(len(paths), weights)
    shared, files = check_inputs(paths, out)
    total, sources, tasks = None, [], []
    for p, wi in zip(paths, w):
        model, tokenizer, manifest = load_checkpoint(p)  # checksums and sizes checked before allocation
        total = accumulate(total, unique_state(model), wi, str(p))
        sources.append({"path": str(p), "weight": wi, "step": step_of(manifest), "files": manifest.get("files")})
        tasks.append(((manifest.get("recipe") or {}).get("config") or {}).get("tasks") or [])
        if p != paths[-1]:
            del model  # one input's weights in memory at a time, beside the float64 sum
    with torch.no_grad():
        for k, v in unique_state(model).items():
            v.copy_(total.pop(k).to(v.dtype) if v.is_floating_point() else total.pop(k))
    # the derived fields (family, model_args, dtype, ...) were compared above; save_checkpoint derives them again
    carried = {k: v for k, v in shared.items() if k not in DERIVED and v is not None}
    shared_tasks = tasks[0] if all(t == tasks[0] for t in tasks) else []
    keep = {**carried, "recipe": {"name": "average", "config": {"tasks": shared_tasks}}, "averaged_from": sources}
    extra = {f: b for f, b in files.items() if f != "config.json"}  # the inputs' own bytes over what save writes
    config = json.loads(files["config.json"]) if "config.json" in files else None
    return save_checkpoint(model, tokenizer, out, manifest=keep, config=config, extra_files=extra)
