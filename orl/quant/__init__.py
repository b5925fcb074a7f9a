"""Weight quantization as a model transform (gpt-fast style, DESIGN section 6).

    model = quantize(model, "int8" | "fp8" | "nvfp4")

swaps every nn.Linear of the backbone (attention and MLP projections, experts, the residual adapter)
for a quantized linear module, in place, and returns the model; a bias (Qwen2's q/k/v) stays a plain
parameter in the model dtype. The model's code never branches on
quantization. Kept in the model's dtype (llama.cpp's recipes also keep the output layer finer):
  - embeddings and lm_head: engines read lm_head.weight (device, dtype) and the tied head is the
    input codebook of the residual context;
  - MoE routers (`mlp.gate`, orl.model.moe.Router): routing is discrete, and a rounding error there sends a token to another
    expert rather than perturbing it.
The checkpoint manifest's `quantization` field is `spec(kind)`; orl.checkpoint builds the plain
model on the meta device, applies the same transform and loads the quantized tensors into it.
"""
from __future__ import annotations

from torch import nn

from orl.model.moe import MoE
from orl.quant.base import NonFiniteWeightError, QuantizationError, QuantLinear
from orl.quant.fp8 import Fp8Linear
from orl.quant.int8 import Int8Linear
from orl.quant.nvfp4 import NVFP4Linear

LINEARS: dict[str, type[QuantLinear]] = {"int8": Int8Linear, "fp8": Fp8Linear, "nvfp4": NVFP4Linear}
KINDS = tuple(LINEARS)
# what the manifest records; a change of format bumps it, and a loader refuses formats it does not know
FORMAT = 1
SCHEMES = {
    "int8": "int8 weight-only, symmetric, one fp32 scale per output channel",
    "fp8": "float8_e4m3fn weights, one fp32 scale per output channel",
    "nvfp4": "e2m1 blocks of 16 packed two per uint8, one float8_e4m3fn scale per block, one fp32 scale per tensor",
}
KEPT = "embeddings, lm_head and MoE routers stay in the model dtype"

__all__ = ["KINDS", "NonFiniteWeightError", "QuantizationError", "QuantLinear", "kind_of_spec", "linear_paths",
           "quantization_of", "quantize", "quantized_names", "spec", "weight_bytes"]


def quantize(model: nn.Module, kind: str) -> nn.Module:
    """Swap the quantizable nn.Linear layers of `model` (an orl Transformer) for `kind`, in place.
    On the meta device only the structure is built (shapes and dtypes, for loading a checkpoint)."""
    if kind not in LINEARS:
        raise QuantizationError(f"unknown quantization {kind!r}; expected one of {', '.join(KINDS)}")
    if done := quantization_of(model):
        raise QuantizationError(f"the model is already quantized ({done['kind']}); quantize the full-precision model")
    cls = LINEARS[kind]
    targets = [(name, mod) for name, mod in model.named_modules() if _quantizable(name, mod)]
    # quantize every layer before swapping any: a bad weight leaves the model untouched
    swaps = [(name, cls.from_linear(mod, name)) for name, mod in targets]
    for name, q in swaps:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, q)
    for mod in model.modules():
        if isinstance(mod, MoE):  # drop the stacked full-precision expert weights of the grouped path
            mod.pack()            # (it cannot run quantized experts; the dense path does)
    return model


def _quantizable(name: str, mod: nn.Module) -> bool:
    # exact nn.Linear: the MoE router is an nn.Linear subclass (orl.model.moe.Router) and stays as it is
    return type(mod) is nn.Linear and name.startswith("model.")


def quantized_modules(model: nn.Module) -> dict[str, QuantLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, QuantLinear)}


def quantization_of(model: nn.Module) -> dict | None:
    """The manifest's `quantization` value for this model: spec(kind), or None when nothing is quantized."""
    kinds = {m.kind for m in quantized_modules(model).values()}
    if len(kinds) > 1:
        raise QuantizationError(f"the model mixes quantization kinds {sorted(kinds)}; one kind per model")
    return spec(kinds.pop()) if kinds else None


def spec(kind: str) -> dict:
    return {"kind": kind, "format": FORMAT, "scheme": SCHEMES[kind], "kept": KEPT}


def kind_of_spec(value) -> str | None:
    """A manifest's `quantization` value -> the kind to apply (None: a plain model). Anything this
    version cannot reproduce exactly is refused with the reason."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("kind") not in LINEARS:
        raise QuantizationError(f"quantization {value!r} is not one this orl knows "
                                f"(expected an object with kind one of {', '.join(KINDS)})")
    if value.get("format") != FORMAT:
        raise QuantizationError(f"quantization format {value.get('format')!r} of kind {value['kind']!r} is not supported "
                                f"(this orl reads format {FORMAT})")
    return value["kind"]


def quantized_names(model: nn.Module) -> set[str]:
    """State-dict names of the quantized tensors (their dtypes are the format's, not the model's; a
    bias is a plain tensor in the model dtype)."""
    return {f"{name}.{b}" for name, m in quantized_modules(model).items()
            for b, t in m._buffers.items() if t is not None and b not in m._non_persistent_buffers_set}


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of the saved weights: {"total", "quantized" (quantized layers with their scales), "other"};
    a tied lm_head counts once."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    quantized = sum(m.weight_bytes() for m in quantized_modules(model).values())
    extra = sum(b.numel() * b.element_size() for m in quantized_modules(model).values()
                for n, b in m.named_buffers() if n in m._non_persistent_buffers_set)
    return {"total": total - extra, "quantized": quantized, "other": total - extra - quantized}


def linear_paths(model: nn.Module, dtype) -> list[str]:
    """The kernels the quantized layers run for activations of `dtype` ("native", "emulated", ...)."""
    return sorted({f"{m.kind}:{m.path_for(dtype)}" for m in quantized_modules(model).values()})

