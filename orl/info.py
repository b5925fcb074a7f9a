"""`orl info`: a checkpoint's manifest, sizes and files, read from headers only (never the weights)."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open

from orl.atomic_dir import MANIFEST, MARK
from orl.checkpoint import FORMAT_VERSION, CheckpointError, _read_config, _weight_files
from orl.tokenizer import TokenizerError, load_tokenizer


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
    if a.attn_logn:
        model += ", scalable softmax (logits x s_h ln n)"
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
    lines += [f"  {p.name:<40} {_human(p.stat().st_size):>10}" for p in sorted(d.iterdir())
              if p.is_file() and p.name != MARK]
    return "\n".join(lines)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
