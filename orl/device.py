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
