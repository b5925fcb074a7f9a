"""Presets of the draft recipe (on-policy training of the fused self-draft, orl.train.draft)."""
from __future__ import annotations

from orl.train.draft import DraftConfig


def tiny_draft() -> DraftConfig:
    """A tiny block-diffusion base with a draft path (the shipped base by default; --base DIR): 240 updates of
    16 prompts, drafts of 4 as the fused decoder runs them, the answers' next-token CE at 0.5 beside the draft
    CE (it sharpens the AR path on its own answers; it does not hold it: tiny_draft7's KL anchor does)."""
    return DraftConfig(updates=240, prompts_per_update=16, spec_tokens=4, max_new_tokens=96, ar_weight=0.5,
                       lr=5e-5, eval_every=40, eval_samples=50, save_every=20)


def tiny_draft7() -> DraftConfig:
    """Issue 21's stage-2 bases (tasks v7, --base DIR): long7xp and prog7xp only (not the helper tasks the base
    also trained on), answers up to 104 tokens, drafts of 8 as benchmarks/lengths_eval.sh's fused mode decodes,
    and the AR path - where these bases' skill beyond their training lengths lives - anchored to the base by
    the KL at weight 1 (`--set kl_weight=0` for the run without it)."""
    return DraftConfig(tasks=("long7xp", "prog7xp"), updates=240, prompts_per_update=16, spec_tokens=8,
                       max_new_tokens=104, ar_weight=0.5, kl_weight=1.0, lr=5e-5, eval_every=40, eval_samples=30,
                       save_every=20)


def tiny_draft7_only() -> DraftConfig:
    """The draft recipe with the outputs held exactly (draft_only): the base, frozen, verifies and a copy of it
    drafts, on every task the base trained on (tiny_draft7 trains long7xp and prog7xp; session 46's run of it set
    the five families, as here) (--base DIR: a length-varied base, e.g. checkpoints/orl-tiny7-base).
    With shared weights the same training cost the AR path 4-6 points beyond the training lengths (docs/BENCHMARKS.md,
    session 46); here the AR path is the base's by construction, and only the TPF can change."""
    return DraftConfig(updates=240, prompts_per_update=16, spec_tokens=8, max_new_tokens=104, ar_weight=0.0,
                       kl_weight=0.0, draft_only=True, lr=5e-5, eval_every=40, eval_samples=30, save_every=20)


def smoke() -> DraftConfig:
    """Seconds-long run for tests, on the shipped tiny base."""
    return DraftConfig(updates=2, prompts_per_update=2, spec_tokens=3, max_new_tokens=16, eval_every=2,
                       eval_samples=2, save_every=1, lr=1e-4, keep_reward=1.0)
