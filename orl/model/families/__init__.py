"""Model families: config.json readers/writers and weight-name maps onto orl.model, by model_type."""
from __future__ import annotations

from types import ModuleType

from orl.model.families import qwen3

FAMILIES: dict[str, ModuleType] = {t: qwen3 for t in qwen3.MODEL_TYPES}


def get_family(model_type: str | None) -> ModuleType:
    if model_type not in FAMILIES:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]
