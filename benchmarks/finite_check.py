"""Cost of the load-time finiteness check (orl.checkpoint_checks.all_finite) on a real checkpoint, against
the per-element scan it replaced (torch.isfinite(t).all(): a bool copy of every tensor).

Reads every tensor of DIR's model.safetensors, then times each check over all of them (best of
--repeats, --threads CPU threads). Both must agree that the weights are finite.

    .venv/bin/python benchmarks/finite_check.py ~/.cache/orl/gemma-3-270m
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from orl.checkpoint_checks import all_finite  # noqa: E402


def per_element(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t if t.element_size() > 1 else t.float()).all())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    with safe_open(a.dir / "model.safetensors", framework="pt") as f:
        tensors = [f.get_tensor(k) for k in f.keys()]
    tensors = [t for t in tensors if t.is_floating_point()]
    n = sum(t.numel() for t in tensors)
    print(f"{a.dir}: {len(tensors)} floating tensors, {n / 1e6:.1f}M values, "
          f"{sorted({str(t.dtype) for t in tensors})}, {a.threads} thread(s), best of {a.repeats}")
    for name, check in (("isfinite(t).all() (before)", per_element), ("all_finite: one fp32 sum (after)", all_finite)):
        best, ok = float("inf"), None
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            ok = all([check(t) for t in tensors])
            best = min(best, time.perf_counter() - t0)
        print(f"  {name:34s} {best:7.3f} s   all finite: {ok}")


if __name__ == "__main__":
    main()
