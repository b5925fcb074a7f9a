"""On-policy rollouts: the serving engine decodes training prompts with the current weights, traces
every denoising state (canvas + the exact residual it consumed), and the task verifiers keep only
correct outputs (DESIGN section 4). No gradients flow here."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from orl.engine import DecodeConfig, Engine, Generation
from orl.eval.tasks import Sample, get_task


@dataclass
class Rollout:
    sample: Sample
    gen: Generation   # with .trace: list[StepRecord]
    verified: bool


def sample_prompts(tasks: tuple[str, ...], n: int, key: str) -> list[Sample]:
    """n training prompts drawn deterministically from `key` (so a resumed run sees the same ones)."""
    rng = random.Random(key)
    return [get_task(rng.choice(tasks)).sample("train", rng.randrange(1 << 30)) for _ in range(n)]


@torch.no_grad()
def collect(engine: Engine, samples: list[Sample], group: int, cfg: DecodeConfig, seed: int) -> list[Rollout]:
    """`group` rollouts per prompt in one batched decode, each row with its own sampling seed."""
    if cfg.max_new_tokens % cfg.block_len:
        raise ValueError("rollouts need max_new_tokens to be a multiple of block_len (whole blocks replay exactly)")
    prompts = [engine.encode(s.prompt) for s in samples for _ in range(group)]
    seeds = [seed * 1_000_003 + i for i in range(len(prompts))]
    gens = engine.generate_ids(prompts, cfg, trace=True, seeds=seeds)
    out = []
    for i, g in enumerate(gens):
        s = samples[i // group]
        out.append(Rollout(s, g, g.finished and get_task(s.task).verify(s.prompt, g.text)))
    return out


def rollout_stats(rollouts: list[Rollout]) -> dict:
    n = max(len(rollouts), 1)
    steps = [k for r in rollouts for k in r.gen.block_steps]
    return {"reward": sum(r.verified for r in rollouts) / n,
            "tpf": sum(r.gen.tpf for r in rollouts) / n,
            "steps_per_block": sum(steps) / max(len(steps), 1),
            "tokens": sum(r.gen.n_tokens for r in rollouts)}
