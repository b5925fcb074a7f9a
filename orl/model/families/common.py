"""Helpers every family reader shares: dtype names as config.json spells them."""
from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UnsupportedConfig(ValueError):
    pass


def dtype_from_name(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UnsupportedConfig(f"unsupported dtype {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    for name, d in DTYPES.items():
        if d == dtype:
            return name
    raise UnsupportedConfig(f"unsupported dtype {dtype}; expected one of {sorted(DTYPES)}")


def config_dtype(cfg: dict) -> torch.dtype:
    # transformers 5 writes "dtype", older versions "torch_dtype"; absent means fp32 (HF's default)
    return dtype_from_name(cfg.get("dtype") or cfg.get("torch_dtype") or "float32")
