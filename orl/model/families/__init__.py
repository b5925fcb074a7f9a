"""Model families: config.json readers/writers and weight-name maps onto orl.model, by model_type."""
from __future__ import annotations

from types import ModuleType

from orl.model.args import ModelArgs
from orl.model.families import diffusion_gemma, dream, fast_dllm_v2, gemma3, llada, llada2_moe, qwen2, qwen3, sdar

# every module: MODEL_TYPES, args_from_config(cfg), to_native(tensors, args); the dLLM families also
# manifest_from_config(cfg) (layout, block size, mask / EOS tokens); qwen3 and gemma3 also write configs
FAMILIES: dict[str, ModuleType] = {t: m for m in (qwen3, gemma3, qwen2, llada, dream, sdar, fast_dllm_v2, llada2_moe,
                                             diffusion_gemma)
                                   for t in m.MODEL_TYPES}


def get_family(model_type: str | None) -> ModuleType:
    if model_type not in FAMILIES:
        raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


def family_for(args: ModelArgs) -> ModuleType:
    """The family whose config.json can describe a model built from these args (for saving)."""
    if diffusion_gemma.is_diffusion_gemma(args):
        return diffusion_gemma
    return gemma3 if gemma3.is_gemma(args) else qwen3
