"""On-policy rollouts: the serving engine decodes training prompts with the current weights, traces
every denoising state (canvas + the exact residual it consumed), and the task verifiers keep only
correct outputs (DESIGN section 4). No gradients flow here.

Rewards: a rollout's reward is its task's `reward(prompt, output)` in [0, 1] (0 for an output cut at
max_new_tokens); pass/fail families give 1.0 iff the verifier accepts. A rollout is `verified`, i.e.
eligible to be kept, when its reward reaches `keep_reward` (ORLConfig.keep_reward, default 1.0: only
fully correct outputs), so partial-credit tasks (docs/TASKS.md) choose how much credit is enough."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from orl.engine import DecodeConfig, Engine, Generation
from orl.engine.stops import with_stop
from orl.eval.tasks import Sample, get_task, trained_tasks
from orl.eval.tasks.custom import reward_of
from orl.train.dist import SINGLE, Dist, setup


@dataclass
class Rollout:
    sample: Sample
    gen: Generation   # with .trace: list[StepRecord]
    verified: bool    # reward >= keep_reward: eligible to supervise training
    reward: float = 0.0


def sample_prompts(tasks: tuple[str, ...], n: int, key: str) -> list[Sample]:
    """n training prompts drawn deterministically from `key` (so a resumed run sees the same ones)."""
    rng = random.Random(key)
    return [get_task(rng.choice(tasks)).sample("train", rng.randrange(1 << 30)) for _ in range(n)]


@torch.no_grad()
def collect(engine: Engine, samples: list[Sample], group: int, cfg: DecodeConfig, seed: int,
            first: int = 0, keep_reward: float = 1.0) -> list[Rollout]:
    """`group` rollouts per prompt in one batched decode, each row with its own sampling seed.
    first: the index of samples[0] in the update's prompt list, when each process rolls out a share
    (torchrun): a row's seed depends on its place in the whole list, so the shares decode exactly
    the rows one process would."""
    if cfg.max_new_tokens % cfg.block_len:
        raise ValueError("rollouts need max_new_tokens to be a multiple of block_len (whole blocks replay exactly)")
    prompts = [engine.encode(s.prompt) for s in samples for _ in range(group)]
    seeds = [seed * 1_000_003 + first * group + i for i in range(len(prompts))]
    # a task's own stop strings (k-shot: the newline that ends the answer line) unless cfg sets some: one
    # batched decode per distinct stop, each row keeping its seed
    stops = [tuple(get_task(s.task).stop) for s in samples for _ in range(group)]
    gens: list[Generation] = [None] * len(prompts)
    for stop in dict.fromkeys(stops):
        rows = [i for i, st in enumerate(stops) if st == stop]
        for i, g in zip(rows, engine.generate_ids([prompts[i] for i in rows], with_stop(cfg, stop), trace=True,
                                                  seeds=[seeds[i] for i in rows])):
            gens[i] = g
    out = []
    for i, g in enumerate(gens):
        s = samples[i // group]
        reward = reward_of(get_task(s.task), s.prompt, g.text) if g.finished else 0.0
        out.append(Rollout(s, g, reward >= keep_reward, reward))
    return out


def rollout_engine(model, tok, cfg) -> Engine:
    """The engine a recipe rolls out and evaluates with: cfg.engine_max_len cache slots, or the model's
    max_seq_len if less (each step attends over every slot)."""
    return Engine(model, tok, max_len=min(cfg.engine_max_len, model.args.max_seq_len))


def select_kept(rollouts: list[Rollout], group: int, keep: str = "verified") -> list[Rollout]:
    """The rollouts that supervise training: every verified one ("verified", DESIGN section 4), or per
    prompt only the verified one that took the fewest forwards ("fastest", first on ties).

    Why "fastest" exists: on a prompt with many valid answers the G verified rollouts are usually G
    different answers, and distilling all of them teaches the multimodal marginal again, so the model
    never becomes confident enough to commit several positions at once; one answer per prompt gives
    a sharp target, and the fastest one is a trajectory that already committed more per step.
    `rollouts` is grouped as `collect` returns it (`group` consecutive rollouts per prompt)."""
    if keep == "verified":
        return [r for r in rollouts if r.verified]
    if keep != "fastest":
        raise ValueError(f"keep must be 'verified' or 'fastest', got {keep!r}")
    if group < 1 or len(rollouts) % group:
        raise ValueError(f"{len(rollouts)} rollouts do not split into groups of {group}")
    kept = []
    for i in range(0, len(rollouts), group):
        ok = [r for r in rollouts[i:i + group] if r.verified]
        if ok:
            kept.append(min(ok, key=lambda r: r.gen.forwards))
    return kept


def rollout_stats(rollouts: list[Rollout], dist: Dist = SINGLE) -> dict:
    """Over the rollouts of every process (one collective under torchrun): mean reward, the fraction
    verified (reward >= keep_reward; equal to the reward for pass/fail tasks), TPF as a ratio of sums
    (all tokens / all forwards, DESIGN.md section 5), steps per block."""
    steps = [k for r in rollouts for k in r.gen.block_steps]
    sums = dist.all_sum(torch.tensor([len(rollouts), sum(r.verified for r in rollouts), sum(r.gen.forwards for r in rollouts),
                                      sum(steps), len(steps), sum(r.gen.n_tokens for r in rollouts),
                                      sum(r.reward for r in rollouts)],
                                     dtype=torch.float64)).tolist()
    n = max(sums[0], 1)
    return {"reward": sums[6] / n, "verified": sums[1] / n, "tpf": sums[5] / max(sums[2], 1),
            "steps_per_block": sums[3] / max(sums[4], 1), "tokens": int(sums[5])}


def base_weights(base: str) -> dict[str, str]:
    """The base's weight files and their sha256 as its orl.json records them ({} for a base without checksums):
    what a resumed run checks its base against (orl.train.orl.save_update records it)."""
    from orl.checkpoint import read_manifest

    files = read_manifest(base).get("files")
    return {n: d for n, d in files.items() if n.endswith(".safetensors")} if isinstance(files, dict) else {}


def start_run(cfg, out, resume: bool, allow_config_change: bool, log, what: str, device: str | None = None,
              check_base: bool = True):
    """The start every rollout-based recipe (ORL, RCD) shares: the tasks the base was trained on unless
    the config names some, the torchrun process group, the output checks and resume (TrainLoop).
    Returns (cfg with its tasks, dist, loop)."""
    from dataclasses import replace

    import torch

    from orl.checkpoint import read_manifest
    from orl.train.loop import ResumeError, TrainLoop

    if not cfg.base:  # the gemma_* presets name no base: the converted model is the user's
        raise ValueError(f"this preset needs a block-diffusion base checkpoint: --base DIR (e.g. the output of "
                         f"`orl train --recipe convert`); got base={cfg.base!r}")
    dist = setup(device)
    if cfg.prompts_per_update < dist.world:
        raise ValueError(f"prompts_per_update={cfg.prompts_per_update} is less than the {dist.world} processes: "
                         f"every process {what} at least one prompt")
    # every rank reads the base's manifest; one that cannot stops them all (Dist.on_every)
    cfg = dist.on_every(lambda: replace(cfg, tasks=cfg.tasks or trained_tasks(read_manifest(cfg.base))))
    loop = TrainLoop(cfg, out, cfg.updates, "update", resume=resume, allow_config_change=allow_config_change, log=log,
                     inputs={"--base": cfg.base}, dist=dist, keep_every=cfg.keep_every)
    # the same --base spelling may name other weights (another cwd); check_base False: the recipe checks its own
    if check_base and loop.state and not allow_config_change:
        recorded = (read_manifest(loop.out).get("recipe") or {}).get("base_weights")
        now = dist.on_every(lambda: base_weights(cfg.base))
        if recorded and recorded != now:
            raise ResumeError(f"refusing to resume {loop.out}: its base {cfg.base!r} now holds other weights than "
                              f"the run started from ({recorded} -> {now}); give the run's own base, or pass "
                              "--allow-config-change to continue on these")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return cfg, dist, loop
