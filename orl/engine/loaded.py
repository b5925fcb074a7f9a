"""What every decoder of a checkpoint shares: loading it, its manifest, and the device its weights
live on."""
from __future__ import annotations

import torch


class LoadedModel:
    """Base of Engine and ARDecoder."""

    objective: str  # the training objective this decoder's checkpoints must carry (orl.json "objective")

    def __init__(self, model: torch.nn.Module, tokenizer, max_len: int | None = None, manifest: dict | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_len = max_len or model.args.max_seq_len
        # the checkpoint's orl.json as loaded (decode defaults: DecodeConfig.from_manifest); {} for a bare model
        self.manifest = dict(manifest or {})

    @classmethod
    def from_checkpoint(cls, directory, device: str = "cpu", dtype: torch.dtype | None = None):
        from orl.checkpoint import load_checkpoint, require_objective

        model, tokenizer, manifest = load_checkpoint(directory, device=device, dtype=dtype)
        require_objective(manifest, cls.objective, directory)
        return cls(model, tokenizer, manifest=manifest)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device
