"""Device names from users (--device, API callers) checked before anything is loaded onto them."""
from __future__ import annotations

import torch

KNOWN = ("cpu", "cuda", "mps")


def resolve_device(name: str | torch.device | None) -> torch.device:
    """None -> cuda when available, else cpu. An unknown type or an absent accelerator is a named error."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {str(name)!r}; expected one of {', '.join(KNOWN)}") from None
    if dev.type not in KNOWN:
        raise ValueError(f"unsupported device {str(name)!r}; expected one of {', '.join(KNOWN)}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(name)!r}: CUDA is not available on this machine (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(name)!r} does not exist: {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {str(name)!r} asked for, but MPS is not available here")
    return dev


def native_bf16(device: str | torch.device = "cpu") -> bool:
    """Whether bf16 matmuls run natively (faster than fp32) on `device`: a CUDA device that supports bf16, or a
    CPU with AVX512-BF16 or AMX. On a CPU without them (AVX2 only) torch emulates bf16 and a matmul runs several
    times slower than in fp32 (docs/RESULTS-gemma.md): bf16 autocast is then a cost, not a saving. The CPU probes are
    torch's private ones: a torch without them answers False (fp32, the safe side)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if dev.type != "cpu":
        return False
    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(bool(p()) for p in probes if p is not None)
