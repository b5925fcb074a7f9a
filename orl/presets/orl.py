"""ORL post-training presets and their ablations (same prompts, rollouts per update and updates,
so the self-generated token budget matches)."""
from __future__ import annotations

import dataclasses

from orl.engine import DecodeConfig
from orl.train.objective import LossWeights
from orl.train.orl import SHIPPED_BASE, ORLConfig
from orl.train.rcd import RCDConfig


def tiny_orl() -> ORLConfig:
    """The recipe of checkpoints/orl-tiny-orl, which was run with `--set updates=600` (the learning rates
    are constant, so 600 updates continue this run; the ablations compare at 240)."""
    return ORLConfig(base=SHIPPED_BASE, updates=240, prompts_per_update=16, group_size=4,
                     rollout=DecodeConfig(block_len=16, max_new_tokens=64, threshold=0.9, temperature=0.7,
                                          residual="adapter"),
                     adapter_dim=128, lr=1e-4, adapter_lr=3e-4, eval_every=60, eval_samples=20, save_every=20,
                     weights=LossWeights(lambda_aec=1.0, rho=0.25, lambda_kl=0.1, kl_cap=1.0))


def tiny_orl7() -> ORLConfig:
    """tiny_orl on a tasks v7 base (pass `--base`, e.g. runs/tiny7-base): rollouts on SUITE_V7's
    in-range sizes (the base manifest's tasks, train split), with room for long7's five-block answers."""
    cfg = tiny_orl()
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_new_tokens=80))


def tiny_orl7_ar() -> ORLConfig:
    """tiny_orl7 with the AR-path anchor (orl.train.ar_anchor) at 2.0, stage 2's nominal ar_aux (not the same
    strength: stage 2 weighs its AR rows inside one mean with the diffusion rows; here 2 L_AR is added to the
    ORL loss): for a base whose fused self-speculative decoding (its AR path) should survive ORL."""
    cfg = tiny_orl7()
    return dataclasses.replace(cfg, weights=dataclasses.replace(cfg.weights, lambda_ar=2.0))


def tiny_orl7_arkl() -> ORLConfig:
    """tiny_orl7 with the AR path's KL anchor to the frozen base (orl.train.ar_anchor) at 1.0, the draft
    recipe's kl_weight: the next-token anchor of tiny_orl7_ar is ~2e-4 on a strong base's kept rollouts (it
    only sharpens), while the KL holds the path's distribution on every rollout, the wrong ones too."""
    cfg = tiny_orl7()
    return dataclasses.replace(cfg, weights=dataclasses.replace(cfg.weights, lambda_ar_kl=1.0))


def tiny_orl7_ref() -> ORLConfig:
    """tiny_orl7_arkl that also trains on the unverified rollouts' states before their first wrong commit, toward a
    correct answer (a verified sibling's, else the task's reference; orl.train.relabel): for a base whose parallel
    decoder is right on few prompts, so that the states where it goes wrong get a target too."""
    return dataclasses.replace(tiny_orl7_arkl(), relabel="reference")


def without_aec(cfg: ORLConfig) -> ORLConfig:
    return dataclasses.replace(cfg, weights=dataclasses.replace(cfg.weights, lambda_aec=0.0))


def without_residual(cfg: ORLConfig) -> ORLConfig:
    """On-policy self-distillation on verified outputs, without residual context."""
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, residual="off"))


def stale_rollouts(cfg: ORLConfig) -> ORLConfig:
    """Each rollout batch is reused for 4 updates (same number of updates, a quarter of the rollouts)."""
    return dataclasses.replace(cfg, rollout_reuse=4)


def no_aec() -> ORLConfig:
    return without_aec(tiny_orl())


def no_residual() -> ORLConfig:
    return without_residual(tiny_orl())


def stale() -> ORLConfig:
    return stale_rollouts(tiny_orl())


def fastest() -> ORLConfig:
    """ORL distilling one verified rollout per prompt, the one with the fewest forwards
    (orl.train.rollout.select_kept): a sharp target on prompts with many valid answers."""
    return dataclasses.replace(tiny_orl(), keep="fastest")


def rcd_of(o: ORLConfig) -> RCDConfig:
    """The off-policy RCD baseline (orl.train.rcd) on an ORL preset's base, tasks, prompt stream,
    updates, learning rate and cadence; the frozen base decodes its data without residual."""
    return RCDConfig(base=o.base, tasks=o.tasks, updates=o.updates, prompts_per_update=o.prompts_per_update,
                     group_size=o.group_size, rollout=dataclasses.replace(o.rollout, residual="off"), lr=o.lr,
                     eval_every=o.eval_every, eval_samples=o.eval_samples, save_every=o.save_every, seed=o.seed,
                     engine_max_len=o.engine_max_len)


def rcd() -> RCDConfig:
    """Off-policy RCD baseline: residuals from the frozen base; tiny_orl's prompt stream and budget."""
    return rcd_of(tiny_orl())


def rcd_smoke() -> RCDConfig:
    return rcd_of(smoke())


def smoke() -> ORLConfig:
    return dataclasses.replace(tiny_orl(), updates=2, prompts_per_update=2, group_size=2, eval_every=2,
                               eval_samples=2, save_every=2, adapter_dim=16,
                               rollout=DecodeConfig(block_len=16, max_new_tokens=32, threshold=0.5,
                                                    temperature=0.7, residual="adapter"))
