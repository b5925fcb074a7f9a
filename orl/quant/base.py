"""What every quantized linear layer shares (DESIGN section 6).

A quantized layer replaces an nn.Linear of a built model (orl.quant.quantize swaps them); the model's
code never branches on quantization. Its tensors are buffers in their storage formats (int8, float8,
packed uint8) plus fp32 scales, saved and loaded under the names of its state dict. `path` names the
kernel its forward runs on the device it sits on, so every report can say what actually ran.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class QuantizationError(ValueError):
    """A model or weight that cannot be quantized as asked (the message names the module)."""


class NonFiniteWeightError(QuantizationError):
    """inf or nan in a weight: no scale represents it, and silently clamping would hide a broken model."""


class QuantLinear(nn.Module):
    """Base: y = x W^T (+ bias), W stored quantized in buffers; a bias (Qwen2's q/k/v) stays an
    unquantized parameter in the model dtype. Subclasses define `kind`, `quantize_weight` (fp weight
    [N, K] -> buffers), `empty_buffers` (shapes and dtypes only), `dequantize` and `matmul`."""

    kind: str = ""

    def __init__(self, in_features: int, out_features: int, buffers: dict[str, Tensor], bias: Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        for name, t in buffers.items():
            self.register_buffer(name, t)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.path = self.choose_path()

    @classmethod
    def from_linear(cls, linear: nn.Linear, name: str) -> "QuantLinear":
        w = linear.weight.detach()
        bias = None if linear.bias is None else linear.bias.detach()
        cls.check_shape(w.shape, name)
        if w.is_meta:  # a model built for loading: the same structure, the values come from the checkpoint
            return cls(w.shape[1], w.shape[0], cls.empty_buffers(w.shape[0], w.shape[1], w.device), bias)
        if not bool(torch.isfinite(w).all()):
            raise NonFiniteWeightError(f"{name}.weight holds inf or nan values; {cls.kind} cannot represent them "
                                       "(fix or retrain the model before quantizing)")
        return cls(w.shape[1], w.shape[0], cls.quantize_weight(w), bias)

    def forward(self, x: Tensor) -> Tensor:
        y = self.matmul(x)
        return y if self.bias is None else y + self.bias

    def matmul(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    @classmethod
    def check_shape(cls, shape: torch.Size, name: str) -> None:
        pass

    @classmethod
    def quantize_weight(cls, w: Tensor) -> dict[str, Tensor]:
        raise NotImplementedError

    @classmethod
    def empty_buffers(cls, out_features: int, in_features: int, device) -> dict[str, Tensor]:
        raise NotImplementedError

    def dequantize(self, dtype: torch.dtype = torch.float32) -> Tensor:
        raise NotImplementedError

    def choose_path(self) -> str:
        """The kernel for the device the buffers are on (recomputed whenever they move)."""
        return "dequantize"

    def path_for(self, dtype: torch.dtype) -> str:
        """The kernel a forward with activations of `dtype` runs: what reports label."""
        return self.path

    def weight_bytes(self) -> int:
        """Bytes of the saved tensors (the quantized weight and its scales)."""
        return sum(b.numel() * b.element_size() for n, b in self._buffers.items()
                   if b is not None and n not in self._non_persistent_buffers_set)

    def _apply(self, fn, recurse=True):
        """Only the device part of a conversion applies to the buffers: model.to(torch.bfloat16) must not
        turn int8 or float8 storage (float8 counts as floating) or the fp32 scales into bf16; the forward
        computes in the activations' dtype anyway. A probe of a dtype no conversion touches reveals the
        device. The bias converts as every parameter does."""
        if self.bias is not None:
            self.bias = nn.Parameter(fn(self.bias.data), requires_grad=False)
        for name, buf in self._buffers.items():
            if buf is None:
                continue
            device = fn(torch.empty(0, dtype=torch.uint8, device=buf.device)).device
            if device != buf.device:
                self._buffers[name] = torch.empty_like(buf, device=device) if buf.is_meta else buf.to(device)
        self.path = self.choose_path()
        return self

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}, path={self.path}"


class PerChannelLinear(QuantLinear):
    """A weight stored as q [N, K] in `storage` with one fp32 scale per output channel, W ~ q * scale
    (int8, fp8). Subclasses set `storage` and `quantize` (w [N, K] -> (q, scale [N]))."""

    storage: torch.dtype
    weight: Tensor        # storage [N, K]
    weight_scale: Tensor  # fp32 [N]

    @staticmethod
    def quantize(w: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    @classmethod
    def quantize_weight(cls, w: Tensor) -> dict[str, Tensor]:
        q, scale = cls.quantize(w)
        return {"weight": q, "weight_scale": scale}

    @classmethod
    def empty_buffers(cls, out_features: int, in_features: int, device) -> dict[str, Tensor]:
        return {"weight": torch.empty(out_features, in_features, dtype=cls.storage, device=device),
                "weight_scale": torch.empty(out_features, dtype=torch.float32, device=device)}

    def dequantize(self, dtype: torch.dtype = torch.float32) -> Tensor:
        return (self.weight.float() * self.weight_scale[:, None]).to(dtype)

    def scaled_matmul(self, x: Tensor) -> Tensor:
        """x @ (q * scale)^T in x's dtype: the matmul on the stored values (exact in every float dtype) and the
        scale on the output, which saves an [N, K] multiply per call. Not in float16: the unscaled product is up
        to 127 (int8) or 448 (fp8) times the weight's and overflows float16's 65504 where the true output does
        not, and a small row's scale (max / 448) is a float16 subnormal with a few bits left; there the weight is
        dequantized in fp32 first (the float16 weight the unquantized model multiplied). bf16 has fp32's range.
        The choice is by dtype, never by value: no host sync."""
        if x.dtype == torch.float16:
            return F.linear(x, self.dequantize(x.dtype))
        return F.linear(x, self.weight.to(x.dtype)) * self.weight_scale.to(x.dtype)


def on_native_fp8_device(device: torch.device) -> bool:
    """FP8 tensor-core matmuls (torch._scaled_mm) need compute capability >= 8.9 (Ada, Hopper, Blackwell)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def on_native_fp4_device(device: torch.device) -> bool:
    """FP4 (NVFP4) tensor cores exist from Blackwell (compute capability 10.0) on."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (10, 0)
