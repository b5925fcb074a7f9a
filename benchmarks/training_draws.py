"""The training draws of the shipped tiny7 base's stages and of an ORL run, replayed exactly from their configs
(benchmarks/heldout_leak.py marks held-out prompts the models trained on with them).

Pretraining: orl/train/pretrain.py's `make_batches` draws step s's rows from `random.Random(f"pretrain|{seed}|{s}")`:
for each task of the config in order, `mix[i]` indices `rng.randrange(1 << 30)` (a task with mix 0 draws none), each
sampled as `get_task(name).sample("train", index)`, with a fixed mix (a balanced mix would depend on losses and is
refused). `stage_indices` replays that stream (checked against `make_batches` itself by tests/test_heldout_leak.py).

Stages (the init chain of checkpoints/orl-tiny7-base):
  1. hint4st-7k-s2: the two-family AR stage (7,000 steps, seed 2, long7xp, prog7xp, long7xph, prog7xph, long7xpf at
     12, 12, 6, 6, 6 rows). Its manifest is not shipped (it lives in ~/.cache/orl/runs, not read here): the config is
     the documented command of docs/results-lengths/s39/launch39.sh and docs/TRAINING.md ("Length-varied trio",
     step 1), preset tiny_base7h, whose `init` is empty (a random init: the chain ends there).
  2. five7w-s2d0, the base shipped until session 54 (checkpoints/orl-tiny7-base at git a2a43e7, its `init` above):
     RECORDED from that manifest (tasks, mix, seed 2; 6,000 steps, 3,000 AR + 3,000 diffusion, one seeded stream
     from step 0; its AR half is the five7w-s2 run it was copied from).
  3. the shipped base itself (base7-more since session 54): read from the manifest (recipe.config: tasks, mix, seed
     12; recipe.step 1,500 steps: docs/results-lengths/s52/more.sh), which names stage 2 as `init`
     checkpoints/orl-tiny7-base with `init_git_commit` a2a43e7.
  --extra-stage base7-more adds stage 3 to a chain without it (a `--manifest` of the old base: `git show
  a2a43e7:checkpoints/orl-tiny7-base/orl.json`); with the shipped base it is there already and not replayed twice.
  --orl MANIFEST adds an ORL run's rollout prompts (orl/train/rollout.py `sample_prompts`, replayed per update from
  the manifest; the shipped ORL model trained on them with reference relabelling); without it "clean" means clean
  for the base only.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "checkpoints" / "orl-tiny7-base" / "orl.json"


@dataclass(frozen=True)
class Stage:
    name: str
    tasks: tuple[str, ...]
    mix: tuple[int, ...]
    seed: int
    steps: int
    source: str
    init: str = ""  # the stage it started from (a key of RECORDED), "" for a random init


BASE_TASKS = ("long7xp", "prog7xp", "split7xp", "constr7xp", "keysort7x", "long7xph", "prog7xph", "long7xpf",
              "split7xps", "split7xpc", "constr7xph", "keysort7xh")
BASE_MIX = (8, 8, 8, 8, 8, 4, 4, 4, 2, 2, 4, 4)
# stages whose manifests are not in this checkout, by the `init` that names them: a run name (the basename of an
# `init`), or for a shipped checkpoint since replaced "NAME@COMMIT" (its manifest's `init_git_commit`)
RECORDED = {
    "hint4st-7k-s2": Stage("hint4st-7k-s2", ("long7xp", "prog7xp", "long7xph", "prog7xph", "long7xpf"),
                           (12, 12, 6, 6, 6), 2, 7000, "docs/results-lengths/s39/launch39.sh (init: none)"),
    # the base shipped until session 54 (3,000 AR + 3,000 diffusion steps, one stream), which the shipped base continued
    "orl-tiny7-base@a2a43e7": Stage("five7w-s2d0", BASE_TASKS, BASE_MIX, 2, 6000,
                                    "checkpoints/orl-tiny7-base at git a2a43e7", init="hint4st-7k-s2"),
}
EXTRA = {  # session 52's continuation of the old base, shipped as checkpoints/orl-tiny7-base since session 54
    "base7-more": Stage("base7-more", BASE_TASKS, BASE_MIX, 12, 1500,
                        "docs/results-lengths/s52/more.sh (init: checkpoints/orl-tiny7-base at git a2a43e7)"),
}


def stage_indices(stage: Stage, want: dict[str, int]):
    """(task, training index) of `stage`'s draws, in orl.train.pretrain.make_batches order, for the tasks in `want`,
    the first want[task] of each; the other tasks' indices are drawn (the stream is shared) and skipped."""
    got = dict.fromkeys(want, 0)
    step = 0
    while any(got[t] < want[t] for t in want):
        rng = random.Random(f"pretrain|{stage.seed}|{step}")  # = make_batches's
        for name, n in zip(stage.tasks, stage.mix):
            if n == 0:
                continue  # make_batches draws nothing for a task that is off
            for index in [rng.randrange(1 << 30) for _ in range(n)]:
                if name in want and got[name] < want[name]:
                    got[name] += 1
                    yield name, index
        step += 1


def base_stages(manifest: str | Path = MANIFEST) -> list[Stage]:
    """The init chain of a pretrained checkpoint, oldest first: its own stage from its manifest, then each `init`
    from RECORDED (an unknown init is an error: its draws would be missing)."""
    data = json.loads(Path(manifest).read_text())
    recipe = data["recipe"]
    cfg = recipe["config"]
    if recipe.get("name") != "pretrain":
        raise ValueError(f"{manifest}: recipe {recipe.get('name')!r}, not a pretrain manifest")
    if cfg.get("balance"):
        raise ValueError(f"{manifest}: a balanced mix (rows per task follow the losses); its draws are not replayable")
    mix = tuple(cfg["mix"]) if cfg.get("mix") else None
    if mix is None:
        k, r = divmod(cfg["batch_size"], len(cfg["tasks"]))
        mix = tuple(k + (i < r) for i in range(len(cfg["tasks"])))
    steps = recipe.get("step") or cfg["ar_steps"] + cfg["diffusion_steps"]
    stages = [Stage(Path(manifest).parent.name, tuple(cfg["tasks"]), mix, cfg["seed"], steps, str(manifest))]
    init = cfg.get("init") or ""
    key = Path(init).name + (f"@{recipe['init_git_commit']}" if recipe.get("init_git_commit") else "")
    while init:
        if key not in RECORDED:
            raise ValueError(f"init {init!r} ({key}): no recorded config for this stage; its draws are unknown")
        stages.insert(0, RECORDED[key])
        init = key = RECORDED[key].init
    return stages


def with_extra(stages: list[Stage], extra: list[str], log=None) -> list[Stage]:
    """`stages` and the EXTRA stages named, each once: one already in the chain (base7-more is the shipped base's own
    stage since session 54) is not replayed twice."""
    out = list(stages)
    for name in extra:
        stage = EXTRA[name]
        same = [s for s in out if (s.tasks, s.mix, s.seed, s.steps) == (stage.tasks, stage.mix, stage.seed, stage.steps)]
        if same:
            if log:
                log(f"--extra-stage {name}: already in the chain as {same[0].name}")
            continue
        out.append(stage)
    return out


def rollout_samples(manifest: str | Path):
    """An ORL run's rollout prompts, replayed from its manifest's config and last update: orl.train.orl draws update
    u's prompts as sample_prompts(tasks, prompts_per_update, "orl|<seed>|u") for every u (with rollout_reuse R,
    every R-th u), all from the train split. Assumes the run kept its tasks, seed, prompts_per_update and
    rollout_reuse on every resume (only `updates` changed for the shipped run); a run resumed inside a reuse batch
    under --allow-config-change also drew at its resume update, which this does not replay."""
    from orl.train.rollout import sample_prompts

    recipe = json.loads(Path(manifest).read_text()).get("recipe") or {}
    if recipe.get("name") != "orl":
        raise ValueError(f"{manifest}: recipe {recipe.get('name')!r}, not an ORL manifest")
    cfg = recipe["config"]
    for u in range(0, recipe.get("update") or cfg["updates"], cfg.get("rollout_reuse") or 1):
        yield from sample_prompts(tuple(cfg["tasks"]), cfg["prompts_per_update"], f"orl|{cfg['seed']}|{u}")
