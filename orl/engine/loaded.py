"""What every decoder of a checkpoint shares: loading it, and the device its weights live on."""
from __future__ import annotations

import torch


class LoadedModel:
    """Base of Engine and ARDecoder; subclasses take (model, tokenizer) in their constructor."""

    model: torch.nn.Module
    objective: str  # the training objective this decoder's checkpoints must carry (orl.json "objective")

    @classmethod
    def from_checkpoint(cls, directory, device: str = "cpu", dtype: torch.dtype | None = None):
        from orl.checkpoint import load_checkpoint, require_objective

        model, tokenizer, manifest = load_checkpoint(directory, device=device, dtype=dtype)
        require_objective(manifest, cls.objective, directory)
        return cls(model, tokenizer)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device
