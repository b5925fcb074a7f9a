"""The cost of ONE ORL update on a base checkpoint (a cost estimate, not a result): load, the preset's
rollouts (with the trace the replay needs), then one update (replay forward, losses, backward, AdamW
step) with every rollout kept (--keep-all), so the replay runs even on a base that solves nothing yet.
Nothing is saved. Run it under `/usr/bin/time -v` for CPU seconds and peak RSS:

  OMP_NUM_THREADS=1 /usr/bin/time -v python benchmarks/orl_update_cost.py --base runs/gemma-convert-grid \\
      --preset gemma_orl --set prompts_per_update=1 --set group_size=2 --set rollout.max_new_tokens=16 --keep-all
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from orl.checkpoint import load_checkpoint
from orl.model.vocab import special_ids
from orl.overrides import apply_overrides
from orl.presets import get_preset
from orl.train.loop import make_optimizer
from orl.train.orl import base_layout, orl_update, with_adapter
from orl.train.rollout import (collect, rollout_engine, rollout_stats, sample_prompts, select_kept,
                               trained_tasks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--preset", default="gemma_orl")
    ap.add_argument("--set", action="append", default=[], help="a preset override, as orl train --set")
    ap.add_argument("--keep-all", action="store_true", help="treat every rollout as verified")
    a = ap.parse_args()
    cfg = apply_overrides(get_preset("orl", a.preset), [*a.set, f"base={a.base}"])
    t0 = time.process_time()
    model, tok, manifest = load_checkpoint(cfg.base)
    if cfg.rollout.residual == "adapter":
        model = with_adapter(model, cfg.adapter_dim, cfg.adapter_alpha, cfg.seed)
    rollout_cfg, ids = base_layout(manifest, cfg.rollout), special_ids(tok, model.args.vocab_size)
    cfg = dataclasses.replace(cfg, tasks=cfg.tasks or trained_tasks(manifest))  # as orl train's start_run
    t1 = time.process_time()
    model.eval()
    prompts = sample_prompts(cfg.tasks, cfg.prompts_per_update, f"orl|{cfg.seed}|0")  # orl train's update 0
    rollouts = collect(rollout_engine(model, tok, cfg), prompts, cfg.group_size, rollout_cfg, seed=cfg.seed * 7919,
                       keep_reward=cfg.keep_reward)
    stats = rollout_stats(rollouts)
    if a.keep_all:
        for r in rollouts:
            r.verified = True
    t2 = time.process_time()
    model.train()
    opt = make_optimizer(model, cfg.lr, adapter_lr=cfg.adapter_lr)
    rec = orl_update(model, opt, select_kept(rollouts, cfg.group_size, cfg.keep), rollouts, cfg, rollout_cfg, ids,
                     None)
    t3 = time.process_time()
    n_unres = sum(int(step.unresolved.sum()) for r in rollouts for step in r.gen.trace)
    # CPU seconds of this process per phase (on a shared machine wall time measures the neighbours)
    print(json.dumps({"load_cpu_s": round(t1 - t0, 1), "rollout_cpu_s": round(t2 - t1, 1),
                      "update_cpu_s": round(t3 - t2, 1),
                      "rollouts": len(rollouts), "states": sum(len(r.gen.trace) for r in rollouts),
                      "unresolved_positions": n_unres, "threads": torch.get_num_threads(), **stats, **rec}))


if __name__ == "__main__":
    main()
