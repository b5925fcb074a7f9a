"""Presets are plain Python functions returning typed configs; `orl train --preset NAME` looks them up here."""
from __future__ import annotations

from typing import Callable

from orl.presets import convert, draft, gemma_orl, orl
from orl.presets.pretrain import (smoke_base, tiny_ar, tiny_base, tiny_base5, tiny_base7, tiny_base7h,
                                  tiny_base7h_control)

PRESETS: dict[str, dict[str, Callable]] = {
    "pretrain": {"tiny_base": tiny_base, "tiny_base5": tiny_base5, "tiny_base7": tiny_base7, "tiny_base7h": tiny_base7h,
                 "tiny_base7h_control": tiny_base7h_control, "tiny_ar": tiny_ar, "smoke": smoke_base},
    "orl": {"tiny_orl": orl.tiny_orl, "tiny_orl7": orl.tiny_orl7, "tiny_orl7_ar": orl.tiny_orl7_ar, "tiny_orl7_arkl": orl.tiny_orl7_arkl,
            "tiny_orl7_ref": orl.tiny_orl7_ref, "no_aec": orl.no_aec, "no_residual": orl.no_residual, "stale": orl.stale,
            "fastest": orl.fastest, "smoke": orl.smoke,
            "gemma_orl": gemma_orl.gemma_orl, "gemma_orl_no_aec": gemma_orl.gemma_orl_no_aec,
            "gemma_orl_no_residual": gemma_orl.gemma_orl_no_residual, "gemma_orl_stale": gemma_orl.gemma_orl_stale,
            "gemma_smoke": gemma_orl.gemma_smoke},
    "rcd": {"rcd": orl.rcd, "smoke": orl.rcd_smoke, "gemma_rcd": gemma_orl.gemma_rcd,
            "gemma_smoke": gemma_orl.gemma_rcd_smoke},
    "draft": {"tiny_draft": draft.tiny_draft, "tiny_draft7": draft.tiny_draft7,
              "tiny_draft7_only": draft.tiny_draft7_only, "smoke": draft.smoke},
    "convert": {"gemma_convert": convert.gemma_convert, "gemma_convert16": convert.gemma_convert16,
                "gemma_convert_short": convert.gemma_convert_short,
                "gemma_convert_gpu": convert.gemma_convert_gpu, "qwen3_convert": convert.qwen3_convert,
                "smoke": convert.smoke},
}


def get_preset(recipe: str, name: str):
    if recipe not in PRESETS:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {sorted(PRESETS)}")
    if name not in PRESETS[recipe]:
        raise ValueError(f"unknown preset {name!r} for recipe {recipe!r}; expected one of {sorted(PRESETS[recipe])}")
    return PRESETS[recipe][name]()
