"""Model families: config.json readers/writers and weight-name maps onto orl.model, by model_type."""
from __future__ import annotations

from types import ModuleType

from orl.model.args import ModelArgs
from orl.model.families import gemma3, qwen3

FAMILIES: dict[str, ModuleType] = {t: qwen3 for t in qwen3.MODEL_TYPES} | {t: gemma3 for t in gemma3.MODEL_TYPES}


def get_family(model_type: str | None) -> ModuleType:
    if model_type not in FAMILIES:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


def family_for(args: ModelArgs) -> ModuleType:
    """The family whose config.json can describe a model built from these args (for saving)."""
    return gemma3 if gemma3.is_gemma(args) else qwen3
