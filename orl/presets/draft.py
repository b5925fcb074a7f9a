"""Presets of the draft recipe (on-policy training of the fused self-draft, orl.train.draft)."""
from __future__ import annotations

from orl.train.draft import DraftConfig


def tiny_draft() -> DraftConfig:
    """A tiny block-diffusion base trained with ar_aux (issue 21's stage-2 bases; --base DIR): 240 updates of
    16 prompts, drafts of 4 as the fused decoder runs them, the AR path held by a next-token loss at 0.5."""
    return DraftConfig(updates=240, prompts_per_update=16, spec_tokens=4, max_new_tokens=96, ar_weight=0.5,
                       lr=5e-5, eval_every=40, eval_samples=50, save_every=20)


def smoke() -> DraftConfig:
    """Seconds-long run for tests, on the shipped tiny base."""
    return DraftConfig(updates=2, prompts_per_update=2, spec_tokens=3, max_new_tokens=16, eval_every=2,
                       eval_samples=2, save_every=1, lr=1e-4, keep_reward=1.0)
