"""Peak resident memory while `orl.checkpoint.load_checkpoint` loads a random ~1B-parameter checkpoint,
against the checkpoint's size on disk (issue 18 item 6: target <= 1.3x).

A random Qwen3-shaped model (dim 2048, 16 layers, FFN 5632, vocab 32000: ~0.95B parameters) is made on
the meta device, materialised uninitialised (to_empty), filled tensor by tensor and written with
save_checkpoint in the given dtype (sharded at --shard-gb). A fresh Python process then imports torch
and orl, reads its resident set (the baseline), loads the checkpoint (optionally cast: --load-dtype),
and reads the kernel's high-water mark (VmHWM). Reported: file bytes, baseline, peak, and
(peak - baseline) against the file bytes and against the loaded model's bytes (the target size of a
cast). Linux only (/proc/self/status).

    .venv/bin/python benchmarks/load_rss.py --dir /tmp/orl_1b --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

SHAPE = dict(vocab_size=32000, dim=2048, n_layers=16, n_heads=16, n_kv_heads=8, head_dim=128, ffn_dim=5632,
             tie_embeddings=False, max_seq_len=4096)

CHILD = r"""
import json, sys, time
import torch
from orl.checkpoint import load_checkpoint

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

base = status("VmRSS")
t = time.perf_counter()
model, _, _ = load_checkpoint(sys.argv[1], dtype=getattr(torch, sys.argv[2]) if sys.argv[2] != "none" else None)
seconds = time.perf_counter() - t
params = sum(p.numel() for p in model.parameters())
model_bytes = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
print(json.dumps(dict(baseline=base, peak=status("VmHWM"), after=status("VmRSS"), seconds=seconds, params=params,
                      model_bytes=model_bytes, dtype=str(next(model.parameters()).dtype))))
"""


def write(directory: Path, dtype: torch.dtype, shard_gb: float) -> None:
    from orl.checkpoint import save_checkpoint
    from orl.model import ModelArgs, Transformer
    from orl.tokenizer import CharTokenizer

    with torch.device("meta"):
        model = Transformer(ModelArgs(**SHAPE))
    model = model.to_empty(device="cpu").to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=g, dtype=torch.float32).to(dtype) * 0.04 - 0.02)
    save_checkpoint(model, CharTokenizer(), directory, max_shard_bytes=int(shard_gb * 2**30))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="where the checkpoint is written (reused if there)")
    ap.add_argument("--dtype", default="bfloat16", help="dtype the checkpoint is written in")
    ap.add_argument("--load-dtype", default="none", help="cast at load (load_checkpoint's dtype); none: keep")
    ap.add_argument("--shard-gb", type=float, default=1.0)
    args = ap.parse_args()
    if not (args.dir / "orl.json").exists():
        t = time.perf_counter()
        write(args.dir, getattr(torch, args.dtype), args.shard_gb)
        print(f"wrote {args.dir} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    file_bytes = sum(p.stat().st_size for p in args.dir.glob("*.safetensors"))
    out = subprocess.run([sys.executable, "-c", CHILD, str(args.dir), args.load_dtype], check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r.update(file_bytes=file_bytes, load_dtype=args.load_dtype, ratio=(r["peak"] - r["baseline"]) / file_bytes,
             ratio_model=(r["peak"] - r["baseline"]) / r["model_bytes"])
    gib = 2**30
    print(f"params {r['params'] / 1e9:.3f}B  file {file_bytes / gib:.2f} GiB  baseline {r['baseline'] / gib:.2f} GiB  "
          f"peak {r['peak'] / gib:.2f} GiB  after {r['after'] / gib:.2f} GiB  load {r['seconds']:.1f}s  "
          f"(peak - baseline) / file = {r['ratio']:.2f}, / loaded model = {r['ratio_model']:.2f}")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
