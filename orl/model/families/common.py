"""Helpers every family reader shares: dtype names as config.json spells them."""
from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UnsupportedConfig(ValueError):
    pass


# a layer count read from a file bounds every per-layer list a reader builds (layer_types): a forged
# 10**9 took 28 s and 5+ GB before failing; the deepest published models have a few hundred layers
MAX_LAYERS = 1 << 16


def layer_count(n: object, key: str = "num_hidden_layers") -> int:
    if type(n) is not int or not 0 < n <= MAX_LAYERS:
        raise UnsupportedConfig(f"{key} must be an integer in [1, {MAX_LAYERS}], got {n!r}")
    return n


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


# ---------------------------------------------------------------- shared by the dLLM family readers

LAYOUTS = ("prompt_block", "absolute_grid", "full_sequence")


class Problems(list):
    """Every unsupported option of one config, raised together so one edit fixes the file."""

    absent: frozenset = frozenset()  # keys with_published_defaults filled in: named as defaults, not as file values

    def flag(self, cfg: dict, key: str, bad, why: str = "") -> None:
        """Name `key` when cfg has it set to a value `bad` accepts (a callable) or equals."""
        if key in cfg and (bad(cfg[key]) if callable(bad) else cfg[key] == bad):
            where = " (absent from config.json: the published config class's default)" if key in self.absent else ""
            self.append(f"{key}={cfg[key]!r}" + (f" ({why})" if why else "") + where)

    def raise_if_any(self, family: str) -> None:
        if self:
            raise UnsupportedConfig(f"unsupported {family} option(s): " + "; ".join(self))


def with_published_defaults(cfg: dict, defaults: dict, problems: Problems) -> dict:
    """cfg with the keys it lacks taken from the family's published config class. The published code runs
    on those defaults, so orl must read the same model or name the key; a default that merely suits orl
    would run another model silently (LLaDA's weight_tying defaults to true, LLaDA2's rms_norm_eps to 1e-5)."""
    problems.absent = frozenset(set(defaults) - set(cfg))
    return {**defaults, **cfg}


def default_rope(cfg: dict, problems: Problems) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) from the 4.x keys or 5.x rope_parameters; only default RoPE."""
    params = cfg.get("rope_parameters") or {}
    for key, src in (("rope_parameters", params), ("rope_scaling", cfg.get("rope_scaling") or {})):
        kind = src.get("rope_type", src.get("type", "default"))
        if kind != "default":
            problems.append(f"{key} type {kind!r} (only default RoPE)")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    return float(theta), float(params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))


def token_ids(value) -> list[int]:
    """eos_token_id and friends: absent, one id, or a list of ids."""
    if value is None:
        return []
    ids = value if isinstance(value, (list, tuple)) else [value]
    if bad := [v for v in ids if type(v) is not int]:  # true is no id, 256.9 is no id
        raise ValueError(f"token ids must be integers, got {bad!r} in {value!r}")
    return list(ids)


def decode_defaults(layout: str, block_len: int | None, mask_token: str, cfg: dict, **extra) -> dict:
    """The manifest fields a published dLLM's config.json implies (orl.checkpoint folds them into the
    manifest of a directory without orl.json): the engine layout, the published block size, the mask
    id if the config has one (else the tokenizer's `mask_token`, the string the family's tokenizer
    uses), and every EOS id the config lists."""
    assert layout in LAYOUTS, layout
    return {"objective": "block_diffusion", "layout": layout, "block_len": block_len,
            "mask_id": cfg.get("mask_token_id"), "mask_token": mask_token,
            "eos_ids": token_ids(cfg.get("eos_token_id")), **extra}
