"""ORL on a converted gemma-3-270m (`orl train --recipe convert --preset gemma_convert*`) and its
ablations (issue 22 item 4). Every preset here is gemma_orl with one change, so the prompt stream (seed,
prompts per update, group size), the updates and hence the self-generated token budget match.

Sized for one CPU: the block length (4) and layout (absolute grid) come from the base's orl.json; a
rollout of up to 48 new tokens holds the longest SUITE answer in Gemma tokens (long: 44, measured on 50
train samples) plus EOS; 2 prompts x 2 rollouts per update keep one update under 2 CPU minutes when
rollouts are kept (extrapolated from one measured update, docs/RESULTS-gemma.md)."""
from __future__ import annotations

import dataclasses

from orl.engine import DecodeConfig
from orl.presets.orl import rcd_of, stale_rollouts, without_aec, without_residual
from orl.train.objective import LossWeights
from orl.train.orl import ORLConfig
from orl.train.rcd import RCDConfig


def gemma_orl() -> ORLConfig:
    """ORL on the converted model (pass --base, e.g. runs/gemma-convert-grid): rollouts on the task
    families whose text the conversion trained on (its corpus.tasks: SUITE for gemma_convert*), threshold
    0.9, the residual adapter, a learning rate a tenth of tiny_orl's for 100x the weights."""
    return ORLConfig(base="", tasks=(), updates=60, prompts_per_update=2, group_size=2,
                     rollout=DecodeConfig(block_len=4, max_new_tokens=48, threshold=0.9, temperature=0.7,
                                          residual="adapter"),
                     adapter_dim=64, lr=1e-5, adapter_lr=3e-4, row_tokens=512, eval_every=20, eval_samples=4,
                     save_every=2, weights=LossWeights(lambda_aec=1.0, rho=0.25, lambda_kl=0.1, kl_cap=1.0))


def gemma_orl_no_aec() -> ORLConfig:
    return without_aec(gemma_orl())


def gemma_orl_no_residual() -> ORLConfig:
    return without_residual(gemma_orl())


def gemma_orl_stale() -> ORLConfig:
    return stale_rollouts(gemma_orl())


def gemma_rcd() -> RCDConfig:
    """The off-policy RCD baseline on gemma_orl's prompt stream and budget."""
    return rcd_of(gemma_orl())


def gemma_smoke() -> ORLConfig:
    """gemma_orl at test size (seconds on a tiny converted model): 2 updates, 8 new tokens."""
    cfg = gemma_orl()
    return dataclasses.replace(cfg, updates=2, adapter_dim=16, eval_every=2, eval_samples=1, save_every=1,
                               rollout=dataclasses.replace(cfg.rollout, max_new_tokens=8, threshold=0.5))


def gemma_rcd_smoke() -> RCDConfig:
    return rcd_of(gemma_smoke())
