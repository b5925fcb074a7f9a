"""What every decoder of a checkpoint shares: loading it, its manifest, and the device its weights
live on."""
from __future__ import annotations

import torch


class LoadedModel:
    """Base of Engine and ARDecoder."""

    objective: str  # the training objective this decoder's checkpoints must carry (orl.json "objective")
    # whether its forwards mark the draft rows of a model with a separate verifier (orl.model.row_split): only
    # the AR decoder's self-speculative rounds do; any other decoder would run the verifier's weights alone
    verifies_drafts: bool = False

    def __init__(self, model: torch.nn.Module, tokenizer, max_len: int | None = None, manifest: dict | None = None):
        from orl.checkpoint import recorded_verifier
        from orl.model.row_split import has_verifier

        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_len = max_len or model.args.max_seq_len
        # the checkpoint's orl.json as loaded (decode defaults: DecodeConfig.from_manifest); {} for a bare model
        self.manifest = dict(manifest or {})
        kind = type(self).__name__
        if has_verifier(model) and not self.verifies_drafts:
            raise ValueError(f"a model with a separate verifier drafts only for self-speculative decoding (the "
                             f"ARDecoder with spec_draft 'diffusion' | 'fused'), not under the {kind}")
        recorded = recorded_verifier(self.manifest) or getattr(model, "verifier_record", None)
        if recorded and not has_verifier(model):
            raise ValueError(f"this checkpoint is a draft-only drafter (a draft-only conversion or draft run; orl.json "
                             f"recipe.verifier: {recorded.get('base')}): its clean rows never trained, so it "
                             f"decodes only as a drafter beside that verifier (orl.verifier.attach_verifier; `orl "
                             f"generate --spec-draft fused --spec-tokens K`), not alone under the {kind}")

    @classmethod
    def from_checkpoint(cls, directory, device: str = "cpu", dtype: torch.dtype | None = None):
        from orl.checkpoint import load_checkpoint, require_objective

        model, tokenizer, manifest = load_checkpoint(directory, device=device, dtype=dtype)
        require_objective(manifest, cls.objective, directory)
        return cls(model, tokenizer, manifest=manifest)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device
